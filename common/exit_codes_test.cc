#include "common/exit_codes.h"

#include <csignal>

#include "absl/status/status.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(ExitCodesTest, TheTableHasOneCodePerCause) {
  const int codes[] = {kExitOk,           kExitFailure,  kExitUsage,
                       kExitBadData,      kExitPeerLost, kExitCheckpointIo,
                       kExitStoppedEarly, kExitTimeout,  ExitCodeForSignal(SIGTERM)};
  for (int i = 0; i < std::size(codes); ++i) {
    for (int j = i + 1; j < std::size(codes); ++j) EXPECT_NE(codes[i], codes[j]);
  }
  EXPECT_EQ(ExitCodeForSignal(SIGTERM), 143);
  EXPECT_EQ(ExitCodeForSignal(SIGUSR2), 140);
}

TEST(ExitCodesTest, UntaggedStatusesGetTheirCodeFromTheCanonicalCode) {
  EXPECT_EQ(ExitCodeOf(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeOf(absl::UnavailableError("the data service at /x is gone")), kExitPeerLost);
  EXPECT_EQ(ExitCodeOf(absl::DeadlineExceededError("allreduce #3")), kExitTimeout);
  EXPECT_EQ(ExitCodeOf(absl::DataLossError("too many unusable samples")), kExitBadData);
  EXPECT_EQ(ExitCodeOf(absl::OutOfRangeError("label 7 outside [0, 4)")), kExitBadData);
  EXPECT_EQ(ExitCodeOf(absl::InternalError("cuda")), kExitFailure);
  EXPECT_EQ(ExitCodeOf(absl::InvalidArgumentError("x")), kExitFailure);
}

TEST(ExitCodesTest, ATagWinsOverTheCanonicalCodeAndSurvivesACopy) {
  const absl::Status tagged =
      WithExitCode(absl::DataLossError("/ckpt/step-10.ckpt: checksum mismatch"), kExitCheckpointIo);
  const absl::Status copy = tagged;
  EXPECT_EQ(ExitCodeOf(copy), kExitCheckpointIo);
  EXPECT_EQ(ExitCodeOf(WithExitCode(tagged, kExitUsage)), kExitUsage);
  EXPECT_OK(WithExitCode(absl::OkStatus(), kExitUsage));
}

TEST(ExitCodesTest, StatusTextLeavesThePayloadOut) {
  const absl::Status tagged = WithExitCode(absl::UnavailableError("gone"), kExitPeerLost);
  EXPECT_EQ(StatusText(tagged), "UNAVAILABLE: gone");
}

TEST(ExitCodesTest, EveryCodeHasACause) {
  EXPECT_EQ(ExitCause(kExitUsage), "bad flag or configuration");
  EXPECT_EQ(ExitCause(kExitBadData), "bad data");
  EXPECT_EQ(ExitCause(kExitPeerLost), "peer lost");
  EXPECT_EQ(ExitCause(kExitCheckpointIo), "checkpoint I/O");
  EXPECT_EQ(ExitCause(kExitTimeout), "timeout");
  EXPECT_EQ(ExitCause(kExitStoppedEarly), "stopped early (resumable)");
  EXPECT_EQ(ExitCause(143), "stopped by signal 15 (resumable)");
  EXPECT_EQ(ExitCause(7), "failure");
}

TEST(ExitCodesTest, ReportFailureReturnsTheCode) {
  EXPECT_EQ(ReportFailure(absl::DeadlineExceededError("MPI_Init did not return")), kExitTimeout);
}

TEST(ExitCodesTest, APeersFailureKeepsItsCodeAndLogsAWarning) {
  const absl::Status peer =
      AsPeerFailure(WithExitCode(absl::UnavailableError("peer"), kExitBadData));
  EXPECT_EQ(ExitCodeOf(peer), kExitBadData);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ReportFailure(peer), kExitBadData);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(logged.find("] W bad data (exit 65): UNAVAILABLE: peer"), std::string::npos) << logged;
}

}  // namespace
}  // namespace stoker
