// Addresses of Unix-domain sockets, which the data service listens on and the trainer and
// launcher connect to: filling a sockaddr_un with the length check sun_path needs, and
// connect(2) / bind(2) on such an address. Socket creation and error policy (which errno
// means "retry", which message to give) stay with the callers, which differ in both.
#ifndef STOKER_COMMON_UNIX_SOCKET_H_
#define STOKER_COMMON_UNIX_SOCKET_H_

#include <sys/un.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker {

// The longest path a Unix socket address holds: sun_path less its terminating NUL
// (107 bytes on Linux).
inline constexpr size_t kMaxUnixSocketPathBytes = sizeof(sockaddr_un::sun_path) - 1;

// The AF_UNIX address of the socket at `path`, zero-filled past the path. InvalidArgument
// when `path` is empty or longer than kMaxUnixSocketPathBytes (the message gives the path
// and both lengths). Callers prefix the message with what the path is for.
absl::StatusOr<sockaddr_un> UnixSocketAddress(absl::string_view path);

// connect(2) of the socket `fd` to `address`: 0, or the errno it failed with (EINTR too:
// whether to retry is the caller's decision).
int ConnectUnixSocket(int fd, const sockaddr_un& address);

// bind(2) of the socket `fd` to `address`: 0, or the errno it failed with.
int BindUnixSocket(int fd, const sockaddr_un& address);

}  // namespace stoker

#endif  // STOKER_COMMON_UNIX_SOCKET_H_
