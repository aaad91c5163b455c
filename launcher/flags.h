// The launcher's command line: its Abseil flags (defined in flags.cc, every one with its
// help) and their mapping into LauncherOptions. Parsing is common/flags.h's strict layer in
// the launcher's wording ("unknown flag --x", "--np=two is not a valid value"); the first
// `--` ends the launcher's flags, and what follows goes to every trainer. `launcher doctor`
// has its own flags (launcher/doctor.h).
#ifndef STOKER_LAUNCHER_FLAGS_H_
#define STOKER_LAUNCHER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "launcher/options.h"

namespace stoker::launcher {

struct LauncherCommandLine {
  bool help = false;  // --help (or -h, --helpfull): print LauncherHelp() and exit 0
  LauncherOptions options;
};

// Parses `args` (argv without argv[0]), sets the launcher's flags and returns the
// validated options (LauncherOptions::Validate). Flags are process-global: not
// thread-safe; tests restore them with absl::FlagSaver.
absl::StatusOr<LauncherCommandLine> ParseLauncherCommandLine(absl::Span<const std::string> args);

// The usage lines (also printed with a usage error).
extern const char kLauncherUsage[];

// Usage, what the launcher does, and every flag with its default and help.
std::string LauncherHelp();

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_FLAGS_H_
