// Tests of WorkerPool: every task runs exactly once, on several threads, each thread with
// its own scratch; the destructor drains the queue; inactive workers take no work; the
// scratch memory is reported; Stop() with a deadline names a worker stuck in a task.
#include "data_service/worker_pool.h"

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/image/transforms.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;

TEST(WorkerPoolTest, RunsEveryTaskExactlyOnce) {
  std::vector<std::atomic<int>> runs(1000);
  {
    WorkerPool pool(4);
    EXPECT_EQ(pool.thread_count(), 4);
    EXPECT_EQ(pool.active_threads(), 4);
    for (size_t i = 0; i < runs.size(); ++i) pool.Submit([&runs, i](SampleScratch&) { runs[i]++; });
  }
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

TEST(WorkerPoolTest, EachThreadHasItsOwnScratch) {
  absl::Mutex mu;
  std::map<std::thread::id, std::set<SampleScratch*>> scratch_of_thread;
  {
    WorkerPool pool(3);
    for (int i = 0; i < 60; ++i) {
      pool.Submit([&](SampleScratch& scratch) {
        absl::SleepFor(absl::Milliseconds(2));
        absl::MutexLock lock(&mu);
        scratch_of_thread[std::this_thread::get_id()].insert(&scratch);
      });
    }
  }
  EXPECT_GT(scratch_of_thread.size(), 1u);
  std::set<SampleScratch*> all;
  for (const auto& [thread, scratches] : scratch_of_thread) {
    EXPECT_EQ(scratches.size(), 1u);
    all.insert(scratches.begin(), scratches.end());
  }
  EXPECT_EQ(all.size(), scratch_of_thread.size());
}

TEST(WorkerPoolTest, InactiveWorkersTakeNoTasks) {
  absl::Mutex mu;
  std::set<std::thread::id> seen;
  WorkerPool pool(4);
  pool.SetActiveThreads(1);
  EXPECT_EQ(pool.active_threads(), 1);
  std::atomic<int> done{0};
  for (int i = 0; i < 40; ++i) {
    pool.Submit([&](SampleScratch&) {
      absl::SleepFor(absl::Milliseconds(1));
      absl::MutexLock lock(&mu);
      seen.insert(std::this_thread::get_id());
      ++done;
    });
  }
  while (done.load() < 40) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(seen.size(), 1u);
  pool.SetActiveThreads(0);
  EXPECT_EQ(pool.active_threads(), 1);
  pool.SetActiveThreads(99);
  EXPECT_EQ(pool.active_threads(), 4);
}

TEST(WorkerPoolTest, ReportsTheScratchItsWorkersKeep) {
  WorkerPool pool(2);
  EXPECT_EQ(pool.scratch_bytes(), 0u);
  std::atomic<bool> ran{false};
  pool.Submit([&](SampleScratch& scratch) {
    scratch.file_bytes.resize(100000);
    ran = true;
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (pool.scratch_bytes() < 100000 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GE(pool.scratch_bytes(), 100000u);
  // A huge file's buffer is not kept.
  pool.SetActiveThreads(1);
  pool.Submit([](SampleScratch& scratch) { scratch.file_bytes.resize(kMaxRetainedFileBytes + 1); });
  pool.Submit([](SampleScratch& scratch) {
    EXPECT_LE(scratch.file_bytes.capacity(), kMaxRetainedFileBytes);
  });
}

TEST(WorkerPoolTest, AnOutliersDecodeBuffersAreFreedAfterItsTask) {
  constexpr int kWidth = 8000;
  constexpr int kHeight = 1200;
  ASSERT_OK_AND_ASSIGN(const TempDir path_temp, TempDir::Create("worker_pool"));
  const std::string path = path_temp.path() + "/wide.png";
  ASSERT_OK(test_util::WritePng(path, kWidth, kHeight,
                                std::vector<uint8_t>(size_t{kWidth} * kHeight * 3, 90)));
  const std::vector<uint8_t> bytes = test_util::ReadFileBytes(path);
  WorkerPool pool(1);
  std::atomic<size_t> grown{0};
  absl::Notification done;
  pool.Submit([&](SampleScratch& scratch) {
    image::TrainParams params;
    params.crop = image::CropBox{0, 0, kHeight, kWidth};
    std::vector<uint8_t> out(224 * 224 * 3);
    EXPECT_OK(image::DecodeAndTransformWithParams(bytes, image::TransformSpec::Train(224), params,
                                                  scratch.transform, out.data()));
    grown = scratch.capacity_bytes();
  });
  pool.Submit([&](SampleScratch&) { done.Notify(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_GT(grown.load(), kMaxRetainedTransformBytes);
  EXPECT_LE(pool.scratch_bytes(), kMaxRetainedTransformBytes);
}

TEST(WorkerPoolTest, ClampsToAtLeastOneThread) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.thread_count(), 1);
  EXPECT_GE(WorkerPool::DefaultThreadCount(1), 1);
  EXPECT_GE(WorkerPool::DefaultThreadCount(0), 1);
  EXPECT_EQ(WorkerPool::DefaultThreadCount(1000000), 1);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores > 4) {
    EXPECT_EQ(WorkerPool::DefaultThreadCount(2), cores - 2);
  }
}

TEST(WorkerPoolTest, StopNamesAWorkerStuckInATaskAtTheDeadline) {
  // The pool outlives the stuck task (Note [Abandoned decodes at shutdown]).
  static WorkerPool* const pool = new WorkerPool(2);
  absl::Notification entered;
  static absl::Notification release;
  pool->Submit([&entered](SampleScratch&) {
    WorkerPool::NoteActivity("sample 3 (/mnt/hung/a.jpg)");
    entered.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  std::vector<BusyWorker> busy = pool->busy_workers();
  ASSERT_EQ(busy.size(), 1u);
  EXPECT_EQ(busy[0].activity, "sample 3 (/mnt/hung/a.jpg)");
  const absl::Time start = absl::Now();
  const absl::Status stopped = pool->Stop(start + absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_THAT(stopped, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                HasSubstr("has been on sample 3 (/mnt/hung/a.jpg) for ")));
  release.Notify();
  EXPECT_OK(pool->Stop(absl::Now() + absl::Seconds(10)));
  EXPECT_TRUE(pool->busy_workers().empty());
}

TEST(WorkerPoolTest, NoteActivityOffThePoolIsANoOp) {
  WorkerPool::NoteActivity("not a worker");
  WorkerPool pool(1);
  EXPECT_TRUE(pool.busy_workers().empty());
  EXPECT_OK(pool.Stop(absl::Now() + absl::Seconds(10)));
  EXPECT_OK(pool.Stop(absl::Now()));  // idempotent
}

}  // namespace
}  // namespace stoker::data_service
