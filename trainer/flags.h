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

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/options.h"

namespace stoker::trainer {

struct TrainerCommandLine {
  bool help = false;  // --help (or -h, --helpfull): print TrainerFlagsHelp() and exit 0
  TrainerOptions options;
};

// Parses `args` (argv without argv[0]), sets the trainer's flags and returns the validated
// options (ValidateOptions). Flags are process-global: not thread-safe; tests restore them
// with absl::FlagSaver.
absl::StatusOr<TrainerCommandLine> ParseTrainerCommandLine(absl::Span<const char* const> args);

// The current flag values as options, validated. For callers that set flags themselves.
absl::StatusOr<TrainerOptions> OptionsFromFlags();

// Usage, every flag by section with its default and help, and the exit codes.
std::string TrainerFlagsHelp();

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_FLAGS_H_
