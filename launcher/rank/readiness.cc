#include "launcher/rank/readiness.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"

namespace stoker::launcher {

bool AcceptsConnections(const std::string& path, std::string* error) {
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(path);
  if (!address.ok()) {
    *error = std::string(address.status().message());
    return false;
  }
  for (int type : {SOCK_SEQPACKET, SOCK_STREAM}) {
    UniqueFd fd(socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      *error = absl::StrCat("socket: ", std::strerror(errno));
      return false;
    }
    int rc;
    do {
      rc = ConnectUnixSocket(fd.get(), *address);
    } while (rc == EINTR);
    if (rc == 0) return true;
    *error = std::strerror(rc);
    if (rc != EPROTOTYPE) return false;  // the socket is there, of the other type
  }
  return false;
}

absl::Status AwaitAcceptingSocket(ChildProcess& child, const std::string& path,
                                  absl::Duration timeout, absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last_error;
  ChildProcess* children[] = {&child};
  while (true) {
    if (AcceptsConnections(path, &last_error)) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(child.Describe(), " did not accept connections on ", path, " within ",
                       absl::FormatDuration(timeout), " (last error: ", last_error, ")"));
    }
    absl::StatusOr<WaitResult> waited =
        WaitForFirstExit(children, std::min(interval, deadline - now));
    if (!waited.ok()) return waited.status();
    if (waited->event == WaitResult::Event::kExited) {
      return absl::UnavailableError(absl::StrCat(child.Describe(), " ",
                                                 child.exit_status()->ToString(),
                                                 " before it accepted connections on ", path));
    }
  }
}

}  // namespace stoker::launcher
