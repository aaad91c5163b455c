// The writer thread of asynchronous checkpoints: one write in flight while the caller goes
// on, a second one waits for it, a failed write's error (with its exit code) reaches every
// later call, and the end waits for the write in flight.
#include "trainer/checkpoint/write_behind.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;

// The writes that ran, in order.
class WriteLog {
 public:
  void Add(int id) {
    absl::MutexLock lock(&mu_);
    ids_.push_back(id);
  }
  std::vector<int> ids() const {
    absl::MutexLock lock(&mu_);
    return ids_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int> ids_ ABSL_GUARDED_BY(mu_);
};

TEST(WriteBehindTest, AWriteRunsOnTheWriterThreadWhileTheCallerGoesOn) {
  WriteBehind writes;
  absl::Notification release;
  std::atomic<bool> wrote{false};
  std::thread::id writer;
  ASSERT_OK_AND_ASSIGN(absl::Duration waited, writes.Start([&] {
    writer = std::this_thread::get_id();
    release.WaitForNotification();
    wrote = true;
    return absl::OkStatus();
  }));
  EXPECT_EQ(waited, absl::ZeroDuration()) << "nothing was in flight";
  EXPECT_TRUE(writes.busy());
  EXPECT_OK(writes.error()) << "error() does not wait for the write in flight";
  EXPECT_FALSE(wrote);
  release.Notify();
  EXPECT_OK(writes.Wait());
  EXPECT_TRUE(wrote);
  EXPECT_FALSE(writes.busy());
  EXPECT_NE(writer, std::this_thread::get_id());
}

TEST(WriteBehindTest, ASecondWriteWaitsForTheOneInFlightAndSaysHowLong) {
  WriteBehind writes;
  WriteLog log;
  absl::Notification release_first;
  ASSERT_OK(writes
                .Start([&] {
                  release_first.WaitForNotification();
                  log.Add(1);
                  return absl::OkStatus();
                })
                .status());
  std::atomic<bool> second_started{false};
  absl::StatusOr<absl::Duration> second_waited;
  std::thread caller([&] {
    second_waited = writes.Start([&] {
      log.Add(2);
      return absl::OkStatus();
    });
    second_started = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(second_started) << "a second write was handed over while one was in flight";
  EXPECT_TRUE(log.ids().empty());
  release_first.Notify();
  caller.join();
  ASSERT_OK(second_waited);
  EXPECT_GE(*second_waited, absl::Milliseconds(150));
  EXPECT_OK(writes.Wait());
  EXPECT_EQ(log.ids(), (std::vector<int>{1, 2}));
}

TEST(WriteBehindTest, AFailedWritesErrorReachesEveryLaterCallWithItsExitCode) {
  WriteBehind writes;
  ASSERT_OK(writes
                .Start([] {
                  return WithExitCode(absl::ResourceExhaustedError("cannot write ckpt: ENOSPC"),
                                      kExitCheckpointIo);
                })
                .status());
  const absl::Status waited = writes.Wait();
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ExitCodeOf(waited), kExitCheckpointIo);
  EXPECT_EQ(ExitCodeOf(writes.error()), kExitCheckpointIo);
  std::atomic<bool> ran{false};
  const absl::StatusOr<absl::Duration> next = writes.Start([&] {
    ran = true;
    return absl::OkStatus();
  });
  EXPECT_THAT(next, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ExitCodeOf(next.status()), kExitCheckpointIo);
  EXPECT_FALSE(writes.Wait().ok()) << "the error was lost";
  EXPECT_FALSE(ran) << "nothing is written after a failed write";
}

TEST(WriteBehindTest, AnErrorIsReportedOnceTheWriteHasEnded) {
  WriteBehind writes;
  absl::Notification release;
  ASSERT_OK(writes
                .Start([&] {
                  release.WaitForNotification();
                  return absl::DataLossError("first");
                })
                .status());
  EXPECT_OK(writes.error());
  release.Notify();
  EXPECT_THAT(writes.Wait(), StatusIs(absl::StatusCode::kDataLoss, "first"));
  EXPECT_THAT(writes.error(), StatusIs(absl::StatusCode::kDataLoss, "first"));
}

TEST(WriteBehindTest, TheEndWaitsForTheWriteInFlight) {
  std::atomic<bool> wrote{false};
  {
    WriteBehind writes;
    ASSERT_OK(writes
                  .Start([&] {
                    absl::SleepFor(absl::Milliseconds(300));
                    wrote = true;
                    return absl::OkStatus();
                  })
                  .status());
  }
  EXPECT_TRUE(wrote) << "the destructor returned before the write in flight ended";
}

TEST(WriteBehindTest, WhatAWriteHoldsIsReleasedBeforeTheNextStarts) {
  WriteBehind writes;
  auto snapshot = std::make_shared<int>(7);
  std::weak_ptr<int> watch = snapshot;
  ASSERT_OK(writes.Start([held = std::move(snapshot)] { return absl::OkStatus(); }).status());
  std::atomic<bool> released{false};
  ASSERT_OK(writes
                .Start([&] {
                  released = watch.expired();
                  return absl::OkStatus();
                })
                .status());
  ASSERT_OK(writes.Wait());
  EXPECT_TRUE(released);
}

}  // namespace
}  // namespace stoker::trainer
