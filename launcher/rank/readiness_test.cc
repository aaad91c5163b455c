#include "launcher/rank/readiness.h"

#include <string>

#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/rank/child_process.h"
#include "launcher/rank/job_files.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;

// The fake data service (launcher/testing/fake_data_service.cc) in `behaviour`, on a fresh
// socket in /tmp (TEST_TMPDIR may be too long for a socket path).
class ReadinessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_id_ = GenerateJobId();
    absl::StatusOr<std::string> dir = MakeNodeJobDirectory("/tmp", job_id_);
    ASSERT_OK(dir);
    socket_ = NodeSocketPath("/tmp", job_id_, 0);
    ASSERT_OK_AND_ASSIGN(shm_dir_, TempDir::Create("shm"));
    shm_ = shm_dir_.path();
  }
  void TearDown() override { RemoveJobDirectory("/tmp", job_id_); }

  ChildProcess Start(const std::string& behaviour, const std::string& socket_type = "seqpacket") {
    ChildSpec spec{"fake data service",
                   testing::Runfile("launcher/fake_data_service"),
                   {"fake_data_service", "--socket=" + socket_, "--job_id=" + job_id_},
                   {"STOKER_FAKE_DATA_SERVICE=" + behaviour, "STOKER_FAKE_SHM_DIR=" + shm_,
                    "STOKER_FAKE_SOCKET_TYPE=" + socket_type}};
    absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(spec);
    EXPECT_OK(child);
    return std::move(*child);
  }

  std::string job_id_;
  std::string socket_;
  TempDir shm_dir_;
  std::string shm_;
};

TEST_F(ReadinessTest, NothingListeningIsNotReady) {
  std::string error;
  EXPECT_FALSE(AcceptsConnections(socket_, &error));
  EXPECT_THAT(error, HasSubstr("No such file"));
}

TEST_F(ReadinessTest, AListeningServiceIsReady) {
  for (const char* type : {"seqpacket", "stream"}) {
    ChildProcess child = Start("serve", type);
    EXPECT_OK(AwaitAcceptingSocket(child, socket_, absl::Seconds(10))) << type;
    EXPECT_OK(child.Terminate(absl::Seconds(5)));
  }
}

TEST_F(ReadinessTest, ServiceThatExitsFirstIsUnavailableWithItsExitCode) {
  ChildProcess child = Start("exit_before_ready:3");
  const absl::Status ready = AwaitAcceptingSocket(child, socket_, absl::Seconds(10));
  EXPECT_THAT(ready, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(ready.message()),
              HasSubstr("exited with code 3 before it accepted connections on " + socket_));
  EXPECT_TRUE(child.has_exited());
}

TEST_F(ReadinessTest, ServiceThatNeverListensTimesOut) {
  ChildProcess child = Start("never_ready");
  const absl::Status ready = AwaitAcceptingSocket(child, socket_, absl::Milliseconds(300));
  EXPECT_THAT(ready, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(ready.message()), HasSubstr("did not accept connections"));
  EXPECT_OK(child.Terminate(absl::Seconds(5)));
}

}  // namespace
}  // namespace stoker::launcher
