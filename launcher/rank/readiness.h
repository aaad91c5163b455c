// Readiness of a data service: it is ready once connect(2) to its Unix socket succeeds.
// The probe connects and closes at once, sending nothing.
#ifndef STOKER_LAUNCHER_RANK_READINESS_H_
#define STOKER_LAUNCHER_RANK_READINESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "launcher/rank/child_process.h"

namespace stoker::launcher {

// True when a connect(2) to the Unix socket at `path` succeeds; `error` says why not. The
// data service listens on a SOCK_SEQPACKET socket; a SOCK_STREAM one is accepted too, so the
// probe does not tie the launcher to the data service's choice. Non-blocking, so a full
// backlog cannot hang the caller.
bool AcceptsConnections(const std::string& path, std::string* error);

// Probes `path` every `interval` until it accepts connections (OK), `child` exits first
// (Unavailable, with its exit status; the child is reaped), or `timeout` passes
// (DeadlineExceeded, with the last connect error). The messages name the child and the path.
absl::Status AwaitAcceptingSocket(ChildProcess& child, const std::string& path,
                                  absl::Duration timeout,
                                  absl::Duration interval = absl::Milliseconds(50));

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_READINESS_H_
