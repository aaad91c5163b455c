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
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;

TEST(UnixSocketTest, AddressHoldsThePathNulTerminated) {
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress("/tmp/x.sock");
  ASSERT_OK(address);
  EXPECT_EQ(address->sun_family, AF_UNIX);
  EXPECT_STREQ(address->sun_path, "/tmp/x.sock");
}

TEST(UnixSocketTest, ThePathMayFillSunPathLessItsNul) {
  EXPECT_EQ(kMaxUnixSocketPathBytes, sizeof(sockaddr_un::sun_path) - 1);
  const std::string longest(kMaxUnixSocketPathBytes, 'a');
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(longest);
  ASSERT_OK(address);
  EXPECT_EQ(address->sun_path[kMaxUnixSocketPathBytes], '\0');
  EXPECT_EQ(std::string(address->sun_path), longest);
}

TEST(UnixSocketTest, EmptyAndOverlongPathsAreInvalidArguments) {
  EXPECT_THAT(UnixSocketAddress(""), StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string too_long(kMaxUnixSocketPathBytes + 1, 'a');
  const absl::Status status = UnixSocketAddress(too_long).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               ::testing::AllOf(
                                   HasSubstr(absl::StrCat(too_long.size(), " bytes")),
                                   HasSubstr(absl::StrCat("at most ", kMaxUnixSocketPathBytes)))));
}

TEST(UnixSocketTest, ConnectReachesABoundListener) {
  // In /tmp: TEST_TMPDIR is too long a parent for a socket path.
  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::CreateShort("unixsock"));
  const std::string path = dir.Join("s.sock");
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(path);
  ASSERT_OK(address);

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
}

}  // namespace
}  // namespace stoker
