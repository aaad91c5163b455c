#include "data_service/worker_pool.h"

#include <algorithm>
#include <utility>

namespace stoker::data_service {

WorkerPool::WorkerPool(int threads) {
  const int count = std::max(1, threads);
  active_ = count;
  workers_.reserve(count);
  for (int i = 0; i < count; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->pool = this;
    workers_.back()->index = i;
  }
  threads_.reserve(count);
  for (int i = 0; i < count; ++i) {
    Worker* worker = workers_[i].get();
    threads_.emplace_back([this, worker] { WorkLoop(worker); });
  }
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void WorkerPool::SetActiveThreads(int active) {
  absl::MutexLock lock(&mu_);
  active_ = std::clamp(active, 1, thread_count());
}

int WorkerPool::active_threads() {
  absl::MutexLock lock(&mu_);
  return active_;
}

size_t WorkerPool::scratch_bytes() const {
  size_t total = 0;
  for (const std::unique_ptr<Worker>& worker : workers_) {
    total += worker->scratch_bytes.load(std::memory_order_relaxed);
  }
  return total;
}

int WorkerPool::DefaultThreadCount(int local_ranks) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores - std::max(1, local_ranks));
}

void WorkerPool::WorkLoop(Worker* worker) {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      // Inactive workers wait; on shutdown every worker helps drain the queue.
      mu_.Await(absl::Condition(
          +[](Worker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->pool->mu_) {
            const WorkerPool& pool = *w->pool;
            return pool.stopping_ || (!pool.tasks_.empty() && w->index < pool.active_);
          },
          worker));
      if (tasks_.empty()) return;  // stopping, and everything submitted has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)(worker->scratch);
    if (worker->scratch.file_bytes.capacity() > kMaxRetainedFileBytes) {
      std::vector<uint8_t>().swap(worker->scratch.file_bytes);
    }
    worker->scratch_bytes.store(worker->scratch.capacity_bytes(), std::memory_order_relaxed);
  }
}

}  // namespace stoker::data_service
