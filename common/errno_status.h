// Converts a failed POSIX call's errno into an absl::Status, once, at the edge.
#ifndef STOKER_COMMON_ERRNO_STATUS_H_
#define STOKER_COMMON_ERRNO_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace stoker {

// Returns a Status whose code follows `errno_value` (ENOENT -> NotFound, EACCES ->
// PermissionDenied, ENOSPC/ENOMEM -> ResourceExhausted, ...) and whose message is
// "<what>: <strerror>".
absl::Status ErrnoToStatus(int errno_value, absl::string_view what);

}  // namespace stoker

#endif  // STOKER_COMMON_ERRNO_STATUS_H_
