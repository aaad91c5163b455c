#include "data_service/worker_pool.h"

#include <algorithm>
#include <utility>

namespace stoker::data_service {

WorkerPool::WorkerPool(int threads) {
  const int count = std::max(1, threads);
  workers_.reserve(count);
  for (int i = 0; i < count; ++i) workers_.emplace_back([this] { WorkLoop(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

void WorkerPool::Submit(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

int WorkerPool::DefaultThreadCount() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores - 2);
}

void WorkerPool::WorkLoop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || !pool->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping, and everything submitted has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace stoker::data_service
