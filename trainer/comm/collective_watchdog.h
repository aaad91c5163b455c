// CollectiveWatchdog: a deadline for every collective of a rank. A thread of its own watches
// the ledgers of the rank's communicators (trainer/comm/collective_ledger.h); when a collective
// has not completed within the timeout it logs which one it is (communicator, sequence
// number, kind), which ranks of the node have not reached it and the last collective each
// of them completed (from the node's progress table), aborts the communicators (NCCL:
// ncclCommAbort), and ends the process if the abort cannot interrupt the wait (a blocked
// MPI call) or has not ended it within a grace period (Note [Collective deadline]).
#ifndef STOKER_TRAINER_COMM_COLLECTIVE_WATCHDOG_H_
#define STOKER_TRAINER_COMM_COLLECTIVE_WATCHDOG_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainer/comm/collective_ledger.h"
#include "trainer/comm/collective_progress_table.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Note [Collective deadline]
// A collective that never completes (a peer stopped, hung, or gone without the job noticing)
// would keep every other rank waiting for ever. So each rank's watchdog thread checks, every
// poll interval, the oldest collective its communicators have not completed; past
// --collective_timeout_s it
//  1. logs the diagnosis: the collective (communicator, #sequence number, kind), how long it
//     waited, the local ranks that have not reached it with their state (gone: the pid no
//     longer exists; stalled: no heartbeat for a while, i.e. stopped or hung; or busy
//     outside collectives), and the last collective each local rank completed;
//  2. arms the process deadline: a detached thread that ends the process (exit code 1)
//     after --collective_abort_grace_s whatever happens next, also when the abort itself
//     hangs;
//  3. aborts every watched communicator. NCCL's ncclCommAbort ends the kernels in flight,
//     the training thread gets an error and fails the usual way (MPI_Abort of the job). An
//     MPI call cannot be interrupted from another thread (MPI_THREAD_FUNNELED), so when a
//     collective is waiting in a communicator that cannot abort, the watchdog ends the
//     process at once with exit code 1; mpirun then ends the other ranks.
// Sequence numbers follow the order of issue, which is the same on every rank, so "#58"
// names the same operation everywhere.

// Note [Asynchronous communicator errors]
// A network fault or a peer gone does not always leave a collective waiting: NCCL records
// it as the communicator's asynchronous error (ncclCommGetAsyncError), and every later
// collective would only hang until --collective_timeout_s. So every poll also asks each
// watched communicator for its AsyncError(); the first one is handled as a timeout is
// (steps 2 and 3 above: the process deadline, then the abort), seconds after the fault.

// Note [Collective side channel]
// The diagnosis must not go through the collectives that are stuck. Each node has a
// CollectiveProgressTable in shared memory (job-unique name, 0600, unlinked as soon as every
// local rank mapped it, so it can never be left behind): each rank's ledgers mirror their
// counters into its slot and its watchdog thread writes a heartbeat there. A stopped rank
// (SIGSTOP) stops beating, a dead one has no process any more; either way its slot still
// shows the last collective it completed. Only the ranks of one's own node are visible: for
// a job over several nodes the report says how many ranks are elsewhere, and each node's
// watchdogs name the ranks of their node.

struct CollectiveWatchdogOptions {
  absl::Duration timeout = absl::Seconds(300);     // --collective_timeout_s
  absl::Duration abort_grace = absl::Seconds(30);  // --collective_abort_grace_s
  // How often the ledgers are checked and the heartbeat written; zero: timeout / 10,
  // between 10 ms and 1 s.
  absl::Duration poll_interval = absl::ZeroDuration();
  int exit_code = 1;
};

// Where the watching rank sits in the job.
struct WatchedRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int node_index = 0;
};

// One local rank's row of the progress table, as the report sees it. Plain data.
struct NodeRankState {
  int rank = -1;  // -1: the rank never joined the table
  pid_t pid = 0;
  bool gone = false;            // its process no longer exists
  double heartbeat_age_s = -1;  // seconds since its last heartbeat
  bool stalled = false;         // no heartbeat for longer than the stall threshold
  uint64_t issued = 0;          // on the communicator of the stuck collective
  uint64_t completed = 0;
  CollectiveKind completed_kind = CollectiveKind::kNone;
  double waiting_s = 0;  // how long its oldest pending collective has waited
};

// Everything the report says. Plain data.
struct StalledCollective {
  int rank = 0;  // the reporting rank
  int world_size = 1;
  int node_index = 0;
  std::string channel;  // the communicator ("gradients", "control")
  uint64_t seq = 0;
  CollectiveKind kind = CollectiveKind::kNone;
  double waited_s = 0;
  absl::Duration timeout;
  std::vector<NodeRankState> node;  // empty without a progress table
};

// The one-paragraph diagnosis logged when a collective times out, e.g. "collective #58
// (allreduce) on the control communicator has not completed after 10.0s
// (--collective_timeout_s=10): rank 1 (pid 4242) has not reached it: stalled, no heartbeat
// for 10.4s (stopped or hung). Last collective each rank of node 0 completed: rank 0 #57
// (allreduce), waiting in #58 for 10.0s; rank 1 #57 (allreduce); ...".
std::string DescribeStalledCollective(const StalledCollective& stall);

// Reads the table's rows for channel `channel` at MonotonicNanos() `now_ns`. A rank counts
// as stalled when its heartbeat is older than `stall_after`.
std::vector<NodeRankState> ReadNodeProgress(const CollectiveProgressTable& table, int channel,
                                            int64_t now_ns, absl::Duration stall_after);

// The watchdog of one rank. Owns the watchdog thread (joined in the destructor). Start()
// and the destructor are called by the training thread; the watched communicators must
// outlive the watchdog. Thread-safe.
//
//   ASSIGN_OR_RETURN(auto watchdog, CollectiveWatchdog::Start(options, place,
//                                                            {&gradients, &control}, &table));
class CollectiveWatchdog {
 public:
  // Ends the process; the default flushes stderr and calls std::_Exit. Tests inject their
  // own (a fault seam) and get the exit code instead.
  using ExitFunction = std::function<void(int exit_code)>;

  // Watches the communicators of `watched` that keep a ledger (duplicates are watched once;
  // at most kMaxProgressChannels). `table` (may be null) is the node's progress table: this
  // rank's slot (place.local_rank) gets the ledgers' counters and the heartbeat. Both must
  // outlive the watchdog. InvalidArgument for a non-positive timeout or a negative grace.
  static absl::StatusOr<std::unique_ptr<CollectiveWatchdog>> Start(
      const CollectiveWatchdogOptions& options, const WatchedRank& place,
      std::vector<Communicator*> watched, CollectiveProgressTable* table,
      ExitFunction exit_process = nullptr);

  // Stops and joins the watchdog thread, and stops the ledgers' mirroring into the table.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Whether a collective timed out (the process is on its way out).
  bool fired() const { return fired_.load(); }
  absl::Duration poll_interval() const { return poll_interval_; }

 private:
  CollectiveWatchdog(const CollectiveWatchdogOptions& options, const WatchedRank& place,
                     std::vector<Communicator*> watched, CollectiveProgressTable* table,
                     ExitFunction exit_process);
  void Run();  // the watchdog thread
  void Beat();
  // Checks every ledger and asynchronous error; fires (and returns true) on a timeout or an
  // asynchronous error (Note [Asynchronous communicator errors]).
  bool CheckOnce();
  // `stalled`: the collective `stuck.pending` timed out (logged with its diagnosis);
  // otherwise the communicator reported an asynchronous error (logged by the caller).
  void Fire(int channel, const CollectiveLedger::Snapshot& stuck, int64_t now_ns,
            bool stalled = true);
  // Logs the diagnosis of the stalled collective (Note [Collective deadline], step 1).
  void ReportStall(int channel, const CollectiveLedger::Snapshot& stuck, int64_t now_ns);
  // Steps 2 and 3 of Note [Collective deadline].
  void AbortAndArmDeadline();

  const CollectiveWatchdogOptions options_;
  const WatchedRank place_;
  const std::vector<Communicator*> watched_;  // each with a ledger, channel = index
  CollectiveProgressTable* const table_;
  const ExitFunction exit_process_;
  const absl::Duration poll_interval_;
  std::atomic<bool> fired_{false};
  bool poll_error_logged_ = false;  // watchdog thread only

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_thread_;  // last: started once everything above is set
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_COLLECTIVE_WATCHDOG_H_
