// FakeCommunicator: the in-process Communicator of tests. A group of N fakes shares one
// rendezvous: each rank's collectives block until every rank has made the same call, as
// MPI's do, and then sum, average or broadcast host memory for real. Fault seams stand in
// for the failures tests need: fail_next (the next collective fails), a latency, Abort()
// that interrupts a waiting collective (or, configured as an MPI communicator, cannot),
// and a hook run inside Abort().
#ifndef STOKER_TRAINER_COMM_FAKE_COMMUNICATOR_H_
#define STOKER_TRAINER_COMM_FAKE_COMMUNICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainer/comm/collective_ledger.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

struct FakeCommunicatorOptions {
  std::string channel = "fake";  // the ledger's channel ("MPI", "NCCL" to stand in for one)
  // Whether Abort() interrupts the collectives in flight and fails every later one and
  // returns true (as NCCL's), or only returns false (as MPI's).
  bool can_abort = true;
  // A collective that some rank does not join within this ends with DeadlineExceeded on
  // the ranks that wait in it (a test that goes wrong fails instead of hanging).
  absl::Duration peer_timeout = absl::Seconds(60);
};

// One rank of an in-process group, over host memory. Each rank is used by one thread at
// a time (world size 1 works on the caller's thread; N > 1 ranks need a thread each).
// fail_next, set_latency, set_on_abort, aborts, ledger() and Abort() are thread-safe.
// Every collective is recorded in the ledger; a failed one counts as completed.
//
// A collective that fails on one rank (fail_next, a mismatched call, Abort, a timeout)
// fails on every rank of it: the other ranks get Unavailable naming that rank, and no
// buffer changes.
//
//   std::vector<std::unique_ptr<FakeCommunicator>> group = FakeCommunicator::Group(3);
//   // thread r: group[r]->AllReduce(data, n, ElementType::kFloat32, ReduceOp::kSum);
class FakeCommunicator final : public Communicator {
 public:
  static std::vector<std::unique_ptr<FakeCommunicator>> Group(int world_size);
  static std::vector<std::unique_ptr<FakeCommunicator>> Group(
      int world_size, const FakeCommunicatorOptions& options);
  ~FakeCommunicator() override;
  FakeCommunicator(const FakeCommunicator&) = delete;
  FakeCommunicator& operator=(const FakeCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override;
  // Every element type, sum and average (integers: the sum divided with truncation).
  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  // Host memory: every operation is complete when it returns. Aborted after Abort().
  absl::Status Synchronize() override;
  CollectiveLedger* ledger() override { return &ledger_; }
  // Counts the call, runs the on_abort hook, then (with can_abort) makes the collective
  // in flight and every later one end with Aborted.
  bool Abort() override;

  // The next AllReduce or Broadcast of this rank returns `status` (its buffer unchanged).
  void fail_next(absl::Status status);
  // Every later collective first sleeps this long.
  void set_latency(absl::Duration latency);
  // Runs inside every Abort() call, before it acts (e.g. a hook that blocks, as an
  // ncclCommAbort that never returns).
  void set_on_abort(std::function<void()> on_abort);
  // Abort() calls so far.
  int aborts() const { return aborts_.load(); }
  // From now on AsyncError() returns `status` (a network fault as NCCL reports it).
  void set_async_error(absl::Status status);
  absl::Status AsyncError() override;

 private:
  struct Rendezvous;
  struct Call;
  FakeCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank);
  absl::Status Collective(const Call& call);

  const std::shared_ptr<Rendezvous> rendezvous_;
  const int rank_;
  CollectiveLedger ledger_;
  uint64_t rounds_joined_ = 0;  // owned by the rank's thread
  absl::Mutex seams_mu_;
  std::optional<absl::Status> fail_next_ ABSL_GUARDED_BY(seams_mu_);
  absl::Duration latency_ ABSL_GUARDED_BY(seams_mu_);
  std::function<void()> on_abort_ ABSL_GUARDED_BY(seams_mu_);
  absl::Status async_error_ ABSL_GUARDED_BY(seams_mu_);
  std::atomic<int> aborts_{0};
};

// Host arithmetic on the element types (float16 and bfloat16 by their bits, rounded to
// nearest even): the element at `p` as a double, and a double stored at `p`.
double LoadElement(ElementType type, const void* p);
void StoreElement(ElementType type, double value, void* p);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_FAKE_COMMUNICATOR_H_
