// data_service's command line: its Abseil flags (defined in flags.cc, every one with its
// help) and their mapping into DataServiceOptions. Parsing is common/flags.h's strict
// layer: an unknown flag, a value that does not parse or is out of range, or a bare
// argument comes back as InvalidArgument naming the flag, so that main() reports it and
// exits with kExitUsage (absl::ParseCommandLine would exit with 1 on its own).
#ifndef STOKER_DATA_SERVICE_FLAGS_H_
#define STOKER_DATA_SERVICE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data_service/options.h"

namespace stoker::data_service {

struct DataServiceCommandLine {
  bool help = false;  // --help (or -h, --helpfull): print DataServiceFlagsHelp() and exit 0
  DataServiceOptions options;
};

// Parses `args` (argv without argv[0]), sets data_service's flags and returns the
// validated options. Flags are process-global: not thread-safe; tests restore them with
// absl::FlagSaver.
absl::StatusOr<DataServiceCommandLine> ParseDataServiceCommandLine(
    absl::Span<const char* const> args);

// The current flag values as options, validated (DataServiceOptions::Validate).
absl::StatusOr<DataServiceOptions> OptionsFromFlags();

// The usage line, then every flag with its default and help.
std::string DataServiceFlagsHelp();

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_FLAGS_H_
