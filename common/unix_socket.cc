// sockaddr_un filling and the connect/bind calls on it.
#include "common/unix_socket.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace stoker {

absl::StatusOr<sockaddr_un> UnixSocketAddress(absl::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("the Unix socket path is empty");
  if (path.size() > kMaxUnixSocketPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("path ", path, " is ", path.size(),
                                                   " bytes; Unix sockets allow at most ",
                                                   kMaxUnixSocketPathBytes));
  }
  sockaddr_un address;
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

int ConnectUnixSocket(int fd, const sockaddr_un& address) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return 0;
  return errno;
}

int BindUnixSocket(int fd, const sockaddr_un& address) {
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return 0;
  return errno;
}

}  // namespace stoker
