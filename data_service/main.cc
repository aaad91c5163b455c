// data_service: one per node. Serves uint8 NHWC batches to the node's trainer ranks through
// shared-memory rings until SIGTERM or SIGINT; then it removes its socket and every
// segment it created and exits 0. Flags: data_service/flags.h (--help lists them). Exit
// codes are the table of common/exit_codes.h: 2 for a bad flag or dataset folder, 65 for
// bad data (the bad-file cap), 124 when decodes were abandoned at shutdown, 1 for other
// failures.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "data_service/flags.h"
#include "data_service/serve.h"

int main(int argc, char** argv) {
  namespace ds = stoker::data_service;
  absl::StatusOr<ds::DataServiceCommandLine> command_line =
      ds::ParseDataServiceCommandLine(absl::MakeConstSpan(argv + 1, argc - 1));
  if (!command_line.ok()) {
    std::fprintf(stderr, "data_service: %s\nRun data_service --help for the flags.\n",
                 std::string(command_line.status().message()).c_str());
    return stoker::kExitUsage;
  }
  if (command_line->help) {
    std::fputs(ds::DataServiceFlagsHelp().c_str(), stdout);
    return stoker::kExitOk;
  }
  stoker::SetLogIdentity(absl::StrCat("data_service node ", command_line->options.service.node_id));

  const ds::ServeOutcome outcome = ds::ServeUntilStopped(command_line->options);
  const int exit_code =
      outcome.status.ok() ? stoker::kExitOk : stoker::ReportFailure(outcome.status);
  if (outcome.decodes_abandoned) {
    // Note [Abandoned decodes at shutdown]: decode threads still run; end without the
    // static destructors they might race with.
    std::fflush(nullptr);
    _exit(exit_code);
  }
  return exit_code;
}
