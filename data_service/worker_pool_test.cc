// Tests of WorkerPool: every task runs exactly once, on several threads, and the
// destructor drains the queue.
#include "data_service/worker_pool.h"

#include <atomic>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

TEST(WorkerPoolTest, RunsEveryTaskExactlyOnce) {
  std::vector<std::atomic<int>> runs(1000);
  {
    WorkerPool pool(4);
    EXPECT_EQ(pool.thread_count(), 4);
    for (size_t i = 0; i < runs.size(); ++i) pool.Submit([&runs, i] { runs[i]++; });
  }
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

TEST(WorkerPoolTest, UsesSeveralThreads) {
  absl::Mutex mu;
  std::set<std::thread::id> seen;
  {
    WorkerPool pool(3);
    for (int i = 0; i < 30; ++i) {
      pool.Submit([&] {
        absl::SleepFor(absl::Milliseconds(5));
        absl::MutexLock lock(&mu);
        seen.insert(std::this_thread::get_id());
      });
    }
  }
  EXPECT_GT(seen.size(), 1u);
}

TEST(WorkerPoolTest, ClampsToAtLeastOneThread) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.thread_count(), 1);
  EXPECT_GE(WorkerPool::DefaultThreadCount(), 1);
}

}  // namespace
}  // namespace stoker::data_service
