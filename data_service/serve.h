// ServeUntilStopped: the data_service process's life, from its validated options to the
// end. It opens the datasets, starts the service (data_service/service.h), confines the
// process (--sandbox), serves until SIGTERM or SIGINT or until the service cannot serve
// any more, then shuts down and removes what the options say (the socket's directory,
// the job owner record).
#ifndef STOKER_DATA_SERVICE_SERVE_H_
#define STOKER_DATA_SERVICE_SERVE_H_

#include "absl/status/status.h"
#include "data_service/options.h"

namespace stoker::data_service {

// How a served process ends.
struct ServeOutcome {
  // OK after a clean stop; else the first failure, with its exit code (common/exit_codes.h):
  // kExitUsage for a dataset or service option the service refuses (a missing folder),
  // the canonical one otherwise.
  absl::Status status;
  // Shutdown left decode threads running (Note [Abandoned decodes at shutdown] in
  // data_service/service.h): the process must end with _exit, without the static
  // destructors those threads might race with.
  bool decodes_abandoned = false;
};

// Serves `options` (already validated) until SIGTERM or SIGINT. Blocks both signals in
// every thread first (the threads it starts inherit the mask) and takes them on the
// calling thread, so call it once, from main(), before any other thread starts.
ServeOutcome ServeUntilStopped(const DataServiceOptions& options);

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_SERVE_H_
