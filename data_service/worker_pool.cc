#include "data_service/worker_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace stoker::data_service {

thread_local WorkerPool::Worker* WorkerPool::current_worker_ = nullptr;

WorkerPool::WorkerPool(int threads) {
  const int count = std::max(1, threads);
  active_ = count;
  running_ = count;
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

WorkerPool::~WorkerPool() { (void)Stop(absl::InfiniteFuture()); }

void WorkerPool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

absl::Status WorkerPool::Stop(absl::Time deadline) {
  absl::MutexLock stop_lock(&stop_mu_);
  if (joined_) return absl::OkStatus();
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ended = mu_.AwaitWithDeadline(absl::Condition(
                                      +[](int* running) { return *running == 0; }, &running_),
                                  deadline);
  }
  if (!ended) {
    std::vector<std::string> busy;
    for (const BusyWorker& worker : busy_workers()) {
      busy.push_back(absl::StrFormat(
          "decode thread %d has been %s for %.1f s", worker.thread,
          worker.activity.empty() ? "in a task" : absl::StrCat("on ", worker.activity),
          absl::ToDoubleSeconds(worker.busy_for)));
    }
    if (busy.empty()) busy.push_back("a decode thread is still ending");
    return absl::DeadlineExceededError(
        absl::StrCat("the decode threads did not end in time: ", absl::StrJoin(busy, "; ")));
  }
  for (std::thread& thread : threads_) thread.join();
  joined_ = true;
  return absl::OkStatus();
}

int WorkerPool::CurrentWorkerIndex() {
  return current_worker_ != nullptr ? current_worker_->index : -1;
}

void WorkerPool::NoteActivity(std::string activity) {
  Worker* worker = current_worker_;
  if (worker == nullptr) return;
  absl::MutexLock lock(&worker->activity_mu);
  worker->activity = std::move(activity);
}

std::vector<BusyWorker> WorkerPool::busy_workers() const {
  std::vector<BusyWorker> busy;
  const absl::Time now = absl::Now();
  for (const std::unique_ptr<Worker>& worker : workers_) {
    absl::MutexLock lock(&worker->activity_mu);
    if (!worker->busy) continue;
    busy.push_back({worker->index, worker->activity, now - worker->busy_since});
  }
  return busy;
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
  current_worker_ = worker;
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      // Inactive workers wait; on shutdown every worker helps drain the queue.
      mu_.Await(absl::Condition(
          +[](Worker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->pool->mu_) {
            return w->pool->stopping_ || (!w->pool->tasks_.empty() && w->index < w->pool->active_);
          },
          worker));
      if (tasks_.empty()) {  // stopping, and everything submitted has run
        --running_;
        return;
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    {
      absl::MutexLock lock(&worker->activity_mu);
      worker->busy = true;
      worker->busy_since = absl::Now();
    }
    std::move(task)(worker->scratch);
    {
      absl::MutexLock lock(&worker->activity_mu);
      worker->busy = false;
      worker->activity.clear();
    }
    TrimSampleScratch(worker->scratch);
    worker->scratch_bytes.store(worker->scratch.capacity_bytes(), std::memory_order_relaxed);
  }
}

}  // namespace stoker::data_service
