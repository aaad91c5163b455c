// The launcher's own command line, `launcher [flags] -- [trainer flags]`, parsed strictly:
// flags go before `--`, only the program's own flags are accepted, and every mistake comes
// back as a Status naming the flag, so that main() can exit with the usage code 2 (absl's
// ParseCommandLine exits with 1 on its own and accepts flags of every linked library).
#ifndef STOKER_LAUNCHER_COMMAND_LINE_H_
#define STOKER_LAUNCHER_COMMAND_LINE_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stoker::launcher {

struct ParsedCommandLine {
  bool help = false;                   // --help, -h or --helpfull was given
  std::vector<std::string> passed_on;  // everything after the first `--`
  std::set<std::string> given;         // names of the flags set on the command line
};

// Sets the absl flags named in `args` (argv without argv[0]) up to the first `--`. Only
// flags defined in a source file whose path ends with `flags_file` (e.g.
// "launcher/main.cc") count. Accepts --name=value, --name value, -name=value, and for bool
// flags --name and --noname. InvalidArgument on an unknown flag, a missing or malformed
// value, or a bare argument before `--`. Flags are process-global: not thread-safe.
absl::StatusOr<ParsedCommandLine> ParseFlags(absl::Span<const char* const> args,
                                             absl::string_view flags_file);

// Lists the flags of `flags_file`, sorted by name, with their defaults and help.
std::string FlagsHelp(absl::string_view flags_file);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_COMMAND_LINE_H_
