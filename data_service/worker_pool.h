// WorkerPool: a fixed set of decode threads, each with its own SampleScratch, that run
// submitted tasks in FIFO order. The service decodes and augments samples on it; how
// many of its threads take work can be lowered while trainer ranks share the node's cores.
#ifndef STOKER_DATA_SERVICE_WORKER_POOL_H_
#define STOKER_DATA_SERVICE_WORKER_POOL_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "data_service/dataset/dataset.h"

namespace stoker::data_service {

// Runs tasks on `threads` worker threads; a task gets the SampleScratch of the thread
// that runs it. Thread-safe. The destructor runs every task already submitted, then joins
// the workers. Tasks must not throw.
//
//   WorkerPool pool(4);
//   pool.Submit([&](SampleScratch& scratch) { dataset.Load(i, options, scratch, dst); });
class WorkerPool {
 public:
  using Task = absl::AnyInvocable<void(SampleScratch& scratch) &&>;

  // `threads` is clamped to at least 1; all of them take work until SetActiveThreads().
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(Task task);

  // Only the first `active` workers (clamped to 1..thread_count()) take new tasks; the
  // others wait, keeping their scratch. Takes effect at each worker's next task.
  void SetActiveThreads(int active);
  int active_threads();
  int thread_count() const { return static_cast<int>(workers_.size()); }

  // The workers' SampleScratch::capacity_bytes() summed, as each published it after its
  // last task: the decode memory the pool keeps.
  size_t scratch_bytes() const;

  // The automatic pool size: the cores (std::thread::hardware_concurrency) less one per
  // trainer rank on the node, at least one.
  static int DefaultThreadCount(int local_ranks);

 private:
  // One worker's state, on its own cache lines.
  struct alignas(64) Worker {
    WorkerPool* pool = nullptr;
    int index = 0;
    SampleScratch scratch;
    std::atomic<size_t> scratch_bytes{0};
  };

  void WorkLoop(Worker* worker);

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;  // last: started after the state above exists
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_WORKER_POOL_H_
