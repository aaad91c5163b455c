// The trainer's command line: its Abseil flags (defined in flags.cc, every one with its
// help) and their mapping into TrainerOptions. Parsing is common/flags.h's strict layer:
// every mistake (an unknown flag, a value that does not parse, a value out of range, an
// unreadable configuration file) comes back as InvalidArgument naming the flag and, for a
// file, the line, so that main() can report it and exit with kExitUsage before MPI starts.
// (absl::ParseCommandLine would exit with 1 on its own.)
//
// A configuration file holds one flag per line, `--name=value` or `name=value`; blank
// lines and lines starting with `#` are ignored. `--config=FILE` and `--flagfile=FILE`
// (Abseil's name for the same thing) read one in place: flags are applied in order, so a
// flag after `--config` overrides the file and one before it is overridden by it.
#ifndef STOKER_TRAINER_FLAGS_H_
#define STOKER_TRAINER_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/options.h"

namespace stoker::trainer {

// Without --data_socket: how ranks group into nodes, and how each node's local rank 0
// starts the node's data service (launcher/rank/node_data_service.h).
struct NodeDataServiceFlags {
  std::string job_id;             // --job_id; rank 0's counts; empty: rank 0 makes one
  std::string program;            // --data_service; empty: next to the trainer
  std::vector<std::string> args;  // --data_service_args, split (ParseDataServiceArgs)
  int ranks_per_node = 0;         // --ranks_per_node; 0: a node is a host
};

struct TrainerCommandLine {
  bool help = false;  // --help (or -h, --helpfull): print TrainerFlagsHelp() and exit 0
  TrainerOptions options;
  NodeDataServiceFlags node_data_service;
};

// Parses `args` (argv without argv[0]), sets the trainer's flags and returns the validated
// options (ValidateOptions). Flags are process-global: not thread-safe; tests restore them
// with absl::FlagSaver.
absl::StatusOr<TrainerCommandLine> ParseTrainerCommandLine(absl::Span<const char* const> args);

// The current flag values as options, validated. For callers that set flags themselves.
absl::StatusOr<TrainerOptions> OptionsFromFlags();

// The current node data service flags. InvalidArgument naming --data_service_args when
// it does not split into --name=value flags the trainer may pass on.
absl::StatusOr<NodeDataServiceFlags> NodeDataServiceFlagsFromFlags();

// Usage, every flag by section with its default and help, and the exit codes.
std::string TrainerFlagsHelp();

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_FLAGS_H_
