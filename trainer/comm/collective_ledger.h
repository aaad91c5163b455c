// CollectiveLedger: the record one communicator keeps of its collectives (a sequence number
// per operation, its kind, when it was issued, which have completed), so that the collective
// watchdog (trainer/comm/collective_watchdog.h) can tell from its own thread that a collective is
// stuck, which one, and since when. The ledger can mirror its counters into a slot of the
// node's progress table (trainer/comm/collective_progress_table.h), where the other local ranks
// read them without going through the (possibly stuck) communicator.
#ifndef STOKER_TRAINER_COMM_COLLECTIVE_LEDGER_H_
#define STOKER_TRAINER_COMM_COLLECTIVE_LEDGER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shm_atomic.h"

namespace stoker::trainer {

// What a collective does. Stored in shared memory as its integer value.
enum class CollectiveKind : uint32_t { kNone = 0, kAllReduce = 1, kBroadcast = 2 };

// "allreduce", "broadcast", "none".
const char* CollectiveKindName(CollectiveKind kind);

// One communicator's progress as plain counters. Lives in process memory or in a slot of
// the node's progress table (shared memory, so another process may read it at any time):
// every member is read and written only with LoadAcquire/StoreRelease (Note [Atomics in
// shared memory] in common/shm_atomic.h). Written by one process only.
struct ChannelProgress {
  uint64_t issued = 0;          // sequence number of the last operation issued
  uint64_t completed = 0;       // of the last one completed (every earlier one too)
  uint32_t issued_kind = 0;     // CollectiveKind of `issued`
  uint32_t completed_kind = 0;  // CollectiveKind of `completed`
  int64_t issued_at_ns = 0;     // MonotonicNanos() when `issued` was issued
};
static_assert(std::is_trivially_copyable_v<ChannelProgress>,
              "ChannelProgress is a shared-memory layout");
static_assert(sizeof(ChannelProgress) == 32, "ChannelProgress is part of a shared-memory layout");

// CLOCK_MONOTONIC in nanoseconds: one clock for every process of a machine.
int64_t MonotonicNanos();

// The record of one communicator's collectives. Sequence numbers start at 1 and follow the
// order of issue, which is the same on every rank (collectives are issued in the same order
// everywhere), so "rank 1 completed #57" means the same operation on every rank.
// Thread-safe: the communicator's thread issues and completes, the watchdog reads.
//
//   const uint64_t seq = ledger.Issue(CollectiveKind::kAllReduce);
//   ... the operation ...
//   ledger.Complete(seq);
class CollectiveLedger {
 public:
  // `channel` names the communicator in messages ("gradients", "control").
  explicit CollectiveLedger(std::string channel) : channel_(std::move(channel)) {}
  CollectiveLedger(const CollectiveLedger&) = delete;
  CollectiveLedger& operator=(const CollectiveLedger&) = delete;

  const std::string& channel() const { return channel_; }

  // Records a new operation; returns its sequence number.
  uint64_t Issue(CollectiveKind kind);
  // Records that operation `seq` and every one before it have completed. Calls with a
  // `seq` not above the last completed one are ignored.
  void Complete(uint64_t seq);

  // A consistent view of the ledger.
  struct Snapshot {
    uint64_t issued = 0;
    uint64_t completed = 0;
    CollectiveKind completed_kind = CollectiveKind::kNone;
    // The oldest operation not completed (seq 0 when every operation has completed).
    uint64_t pending = 0;
    CollectiveKind pending_kind = CollectiveKind::kNone;
    int64_t pending_since_ns = 0;  // MonotonicNanos() when it was issued
  };
  Snapshot Read() const;

  // From now on, also stores the counters in `mirror` (a slot of the node's progress
  // table), which must outlive this ledger or be replaced first; nullptr stops mirroring.
  void MirrorTo(ChannelProgress* mirror);

 private:
  struct Pending {
    uint64_t seq;
    CollectiveKind kind;
    int64_t issued_at_ns;
  };
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string channel_;
  mutable absl::Mutex mu_;
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  CollectiveKind issued_kind_ ABSL_GUARDED_BY(mu_) = CollectiveKind::kNone;
  CollectiveKind completed_kind_ ABSL_GUARDED_BY(mu_) = CollectiveKind::kNone;
  int64_t issued_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);  // issued, not completed, in order
  ChannelProgress* mirror_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_COLLECTIVE_LEDGER_H_
