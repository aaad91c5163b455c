// --data_service_args: data service flags passed through another program, the launcher
// (which starts the data service itself, or hands the flags to the trainers in the cluster
// modes) or a trainer under a bare mpirun (whose node's local rank 0 starts it). One string,
// split into words on spaces, each word one --name=value flag of data_service. Both
// programs parse it here, so that one value means the same in both.
#ifndef STOKER_LAUNCHER_RANK_DATA_SERVICE_ARGS_H_
#define STOKER_LAUNCHER_RANK_DATA_SERVICE_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stoker::launcher {

// Splits `value` on spaces (runs of spaces give no empty word; there is no quoting, so a
// flag's value cannot hold a space) and checks the words as ValidateDataServiceArgs does.
//
//   ParseDataServiceArgs(" --bad_files=fail  --threads=2") -> {"--bad_files=fail", "--threads=2"}
absl::StatusOr<std::vector<std::string>> ParseDataServiceArgs(absl::string_view value);

// InvalidArgument, naming --data_service_args and the word at fault, when a word is not a
// flag with a value (--name=value or -name=value) or sets --socket, --job_id, --node_id or
// --owner_record, which the program that starts the data service decides.
absl::Status ValidateDataServiceArgs(absl::Span<const std::string> args);

// The name of the flag that the word `arg` sets ("threads" for "--threads=2", "-threads"
// or "--threads"); empty when `arg` does not start with '-'.
absl::string_view FlagNameOf(absl::string_view arg);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_DATA_SERVICE_ARGS_H_
