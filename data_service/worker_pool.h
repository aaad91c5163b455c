// WorkerPool: a fixed set of decode threads, each with its own SampleScratch, that run
// submitted tasks in FIFO order. The service decodes and augments samples on it; how
// many of its threads take work can be lowered while trainer ranks share the node's cores.
// Each thread says what it is doing (NoteActivity), so that a stop that cannot wait for a
// read stuck on a hung mount names the thread and the file (Stop with a deadline).
#ifndef STOKER_DATA_SERVICE_WORKER_POOL_H_
#define STOKER_DATA_SERVICE_WORKER_POOL_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data_service/dataset/dataset.h"

namespace stoker::data_service {

// A worker thread in the middle of a task, as busy_workers() reports it.
struct BusyWorker {
  int thread = 0;        // the worker's index, 0..thread_count()-1
  std::string activity;  // its last NoteActivity() of this task; empty if none
  absl::Duration busy_for;
};

// Runs tasks on `threads` worker threads; a task gets the SampleScratch of the thread
// that runs it. Thread-safe. Stop() (or the destructor, which waits as long as it takes)
// runs every task already submitted, then joins the workers. Tasks must not throw.
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

  // Stops the pool: the tasks already submitted still run, then the workers end and are
  // joined; OK then (and on every later call). DeadlineExceeded if some workers are still
  // in a task at `deadline`, naming each (thread, activity, for how long): those threads
  // keep running and keep using the pool, so a pool whose Stop() timed out must not be
  // destroyed before they end (Note [Abandoned decodes at shutdown] in
  // data_service/service.h). Submit() after Stop() is a programmer error.
  absl::Status Stop(absl::Time deadline);

  // Records what the calling worker thread does now (e.g. "sample 12 (train/cat/1.jpg)"),
  // until its task returns; a no-op on threads that are not a pool's workers.
  static void NoteActivity(std::string activity);
  // The calling worker thread's index (0..thread_count()-1); -1 off the pool.
  static int CurrentWorkerIndex();

  // The workers in the middle of a task now, by thread index.
  std::vector<BusyWorker> busy_workers() const;

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
    mutable absl::Mutex activity_mu;
    bool busy ABSL_GUARDED_BY(activity_mu) = false;
    absl::Time busy_since ABSL_GUARDED_BY(activity_mu);
    std::string activity ABSL_GUARDED_BY(activity_mu);
  };

  void WorkLoop(Worker* worker);

  // The worker whose thread is the calling one (null off the pool).
  static thread_local Worker* current_worker_;

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;           // workers not yet out of WorkLoop
  absl::Mutex stop_mu_;                            // serialises Stop()
  bool joined_ ABSL_GUARDED_BY(stop_mu_) = false;  // every thread joined
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;  // last: started after the state above exists
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_WORKER_POOL_H_
