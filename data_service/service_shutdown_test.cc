// Tests of DataService's bounded waits for the samples being decoded (Note [Abandoned
// decodes at shutdown]): a read that never returns holds neither Shutdown() nor a closed
// connection past ServiceOptions::shutdown_timeout, the error names the decode thread and
// the file, and no ring segment or socket is left.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/testing/status_matchers.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "data_service/dataset/testing/forwarding_dataset.h"
#include "data_service/ring/control_protocol.h"
#include "data_service/ring/ring_client.h"
#include "data_service/service.h"
#include "data_service/service_testing.h"
#include "data_service/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

bool SegmentExists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

bool SocketExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// The first Load blocks until Release(), as a read on a hung mount does; every other Load
// is the synthetic dataset's. Describe() names a file, as a folder dataset's does.
class HangingDataset final : public test_util::ForwardingDataset {
 public:
  using ForwardingDataset::ForwardingDataset;
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const override {
    if (!hung_.exchange(true)) {
      hung_index_ = index;
      entered_.Notify();
      release_.WaitForNotification();
      if (fail_after_release_) return absl::InternalError("the disk controller was reset");
    }
    return ForwardingDataset::Load(index, options, scratch, dst);
  }
  std::string Describe(int64_t index) const override {
    return absl::StrCat("sample ", index, " (/mnt/hung/class0/", index, ".jpg)");
  }

  bool WaitUntilHung() const { return entered_.WaitForNotificationWithTimeout(absl::Seconds(10)); }
  int64_t hung_index() const { return hung_index_; }
  void Release() const {
    if (!release_.HasBeenNotified()) release_.Notify();
  }
  // The hung read then fails with an error that stops production.
  void FailAfterRelease() { fail_after_release_ = true; }

 private:
  mutable std::atomic<bool> hung_{false};
  std::atomic<bool> fail_after_release_{false};
  mutable int64_t hung_index_ = -1;  // written before entered_ is notified
  mutable absl::Notification entered_;
  mutable absl::Notification release_;
};

class ServiceShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(address_, test_util::NewServiceAddress("shutdowntest"));
    dataset_ = std::make_shared<HangingDataset>(
        std::shared_ptr<const Dataset>(std::move(*SyntheticDataset::Create({64, 10, 1, false}))));
    ServiceOptions options;
    options.socket_path = address_.socket_path;
    options.job_id = address_.job_id;
    options.threads = 2;
    options.shutdown_timeout = absl::Seconds(1);
    auto service = DataService::Start(options, {dataset_, nullptr});
    ASSERT_OK(service);
    service_ = std::move(*service);
  }
  void TearDown() override {
    dataset_->Release();  // the stuck read returns; what it still uses was kept alive
    service_.reset();
    EXPECT_FALSE(SegmentExists(RingSegmentName(address_.job_id, 0, true)));
  }

  // A client of rank 0 whose first epoch is under way, with one decode stuck.
  std::unique_ptr<RingClient> ClientWithAHungRead() {
    auto client = test_util::ClientWithFirstEpochStarted(address_.socket_path);
    EXPECT_OK(client);
    if (!client.ok()) return nullptr;
    EXPECT_TRUE(dataset_->WaitUntilHung());
    EXPECT_TRUE(SegmentExists(RingSegmentName(address_.job_id, 0, true)));
    return std::move(*client);
  }

  test_util::ServiceAddress address_;
  std::shared_ptr<HangingDataset> dataset_;
  std::unique_ptr<DataService> service_;
};

TEST_F(ServiceShutdownTest, AHungReadHoldsShutdownOnlyUntilItsTimeoutAndIsNamed) {
  auto client = ClientWithAHungRead();
  ASSERT_NE(client, nullptr);
  const absl::Time start = absl::Now();
  const absl::Status stopped = service_->Shutdown();
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(stopped, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(ExitCodeOf(stopped), kExitTimeout);
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3)) << "the shutdown took " << took;
  EXPECT_THAT(stopped.message(), HasSubstr("did not finish within 1s (--shutdown_timeout_s)"));
  EXPECT_THAT(stopped.message(),
              HasSubstr(absl::StrCat("has been on rank 0, sample ", dataset_->hung_index(),
                                     " (/mnt/hung/class0/", dataset_->hung_index(), ".jpg)")));
  EXPECT_THAT(stopped.message(), HasSubstr("decode thread "));
  EXPECT_THAT(stopped.message(), HasSubstr("rank 0: 1 sample(s) of epoch 0, step 0"));
  // Nothing is left for the next job: the ring's name and the socket are gone.
  EXPECT_FALSE(SegmentExists(RingSegmentName(address_.job_id, 0, true)));
  EXPECT_FALSE(SocketExists(address_.socket_path));
  EXPECT_EQ(service_->Shutdown(), stopped);  // idempotent
}

TEST_F(ServiceShutdownTest, ARankThatLeavesWhileAReadHangsStopsTheServiceWithinTheTimeout) {
  auto client = ClientWithAHungRead();
  ASSERT_NE(client, nullptr);
  client.reset();
  const absl::Time start = absl::Now();
  while (service_->health().ok() && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Duration took = absl::Now() - start;
  const absl::Status health = service_->health();
  EXPECT_THAT(health, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(took, absl::Seconds(3)) << "the service noticed after " << took;
  EXPECT_THAT(health.message(), HasSubstr("rank 0 disconnected but rank 0: 1 sample(s)"));
  EXPECT_THAT(health.message(),
              HasSubstr(absl::StrCat("/mnt/hung/class0/", dataset_->hung_index(), ".jpg")));
  EXPECT_FALSE(SegmentExists(RingSegmentName(address_.job_id, 0, true)));
  // The shutdown that follows is bounded too, and names the stuck thread again.
  const absl::Time shutdown_start = absl::Now();
  const absl::Status stopped = service_->Shutdown();
  EXPECT_LT(absl::Now() - shutdown_start, absl::Seconds(3));
  EXPECT_THAT(stopped, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(stopped.message(), HasSubstr("the decode threads did not end in time"));
  EXPECT_FALSE(SocketExists(address_.socket_path));
}

TEST_F(ServiceShutdownTest, AProductionErrorThatCannotReachItsRankIsLoggedNamingIt) {
  dataset_->FailAfterRelease();
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(address_.socket_path);
  ASSERT_OK(address);
  ASSERT_EQ(ConnectUnixSocket(fd.get(), *address), 0);
  ControlMessage reg = NewMessage(MessageType::kRegister, 1);
  SetRequest(test_util::TrainRequest(0, 1, /*batch_size=*/8, /*image_size=*/16), &reg);
  ASSERT_OK(SendMessage(fd.get(), reg));
  ASSERT_OK(ReceiveMessage(fd.get(), absl::Seconds(10)));
  ControlMessage start = NewMessage(MessageType::kStartEpoch, 2);
  start.epoch = 0;
  start.seed = 1;
  ASSERT_OK(SendMessage(fd.get(), start));
  ASSERT_OK(ReceiveMessage(fd.get(), absl::Seconds(10)));
  ASSERT_TRUE(dataset_->WaitUntilHung());
  // The rank reads nothing more: the service's error message cannot reach it.
  ASSERT_EQ(shutdown(fd.get(), SHUT_RD), 0);
  ::testing::internal::CaptureStderr();
  dataset_->Release();
  absl::SleepFor(absl::Seconds(1));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("rank 0 (pid "));
  EXPECT_THAT(log, HasSubstr("cannot send it the production error (rank 0, epoch 0, step 0, "
                             "sample "));
  EXPECT_THAT(log, HasSubstr("the disk controller was reset"));
}

TEST_F(ServiceShutdownTest, WithoutAHungReadShutdownIsOk) {
  dataset_->Release();
  auto client = test_util::ClientWithFirstEpochStarted(address_.socket_path);
  ASSERT_OK(client);
  auto batch = (*client)->Acquire(absl::Seconds(10));
  ASSERT_OK(batch);
  EXPECT_OK(service_->Shutdown());
  EXPECT_FALSE(SegmentExists(RingSegmentName(address_.job_id, 0, true)));
  EXPECT_FALSE(SocketExists(address_.socket_path));
}

}  // namespace
}  // namespace stoker::data_service
