// Unix socket addresses: the length limit, and a bind/connect round trip.
#include "common/unix_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

// A fresh directory in /tmp (TEST_TMPDIR is too long a parent for a socket path).
std::string ShortTempDir() {
  std::string dir = "/tmp/unixsockXXXXXX";
  if (mkdtemp(dir.data()) == nullptr) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
  return dir;
}

TEST(UnixSocketTest, AddressHoldsThePathNulTerminated) {
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress("/tmp/x.sock");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(address->sun_family, AF_UNIX);
  EXPECT_STREQ(address->sun_path, "/tmp/x.sock");
}

TEST(UnixSocketTest, ThePathMayFillSunPathLessItsNul) {
  EXPECT_EQ(kMaxUnixSocketPathBytes, sizeof(sockaddr_un::sun_path) - 1);
  const std::string longest(kMaxUnixSocketPathBytes, 'a');
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(longest);
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(address->sun_path[kMaxUnixSocketPathBytes], '\0');
  EXPECT_EQ(std::string(address->sun_path), longest);
}

TEST(UnixSocketTest, EmptyAndOverlongPathsAreInvalidArguments) {
  EXPECT_EQ(UnixSocketAddress("").status().code(), absl::StatusCode::kInvalidArgument);
  const std::string too_long(kMaxUnixSocketPathBytes + 1, 'a');
  const absl::Status status = UnixSocketAddress(too_long).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat(too_long.size(), " bytes")))
      << status;
  EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("at most ", kMaxUnixSocketPathBytes)))
      << status;
}

TEST(UnixSocketTest, ConnectReachesABoundListener) {
  const std::string dir = ShortTempDir();
  const std::string path = dir + "/s.sock";
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(path);
  ASSERT_TRUE(address.ok()) << address.status();

  UniqueFd client(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(client.valid());
  EXPECT_EQ(ConnectUnixSocket(client.get(), *address), ENOENT);  // nothing there yet

  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener.valid());
  ASSERT_EQ(BindUnixSocket(listener.get(), *address), 0);
  EXPECT_EQ(BindUnixSocket(UniqueFd(socket(AF_UNIX, SOCK_SEQPACKET, 0)).get(), *address),
            EADDRINUSE);
  ASSERT_EQ(listen(listener.get(), 1), 0);
  UniqueFd second(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  EXPECT_EQ(ConnectUnixSocket(second.get(), *address), 0);

  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace stoker
