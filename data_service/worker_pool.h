// WorkerPool: a fixed set of worker threads that run submitted tasks in FIFO order. The
// service decodes and augments samples on it.
#ifndef STOKER_DATA_SERVICE_WORKER_POOL_H_
#define STOKER_DATA_SERVICE_WORKER_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace stoker::data_service {

// Runs tasks on `threads` worker threads. Thread-safe. The destructor runs every task
// already submitted, then joins the workers. Tasks must not throw.
//
//   WorkerPool pool(4);
//   pool.Submit([&] { DecodeOne(i); });
class WorkerPool {
 public:
  // `threads` is clamped to at least 1.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(absl::AnyInvocable<void() &&> task);
  int thread_count() const { return static_cast<int>(workers_.size()); }

  // The default pool size: leave two cores to the trainers, at least one thread.
  static int DefaultThreadCount();

 private:
  void WorkLoop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;  // last: started after the state above exists
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_WORKER_POOL_H_
