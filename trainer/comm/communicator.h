// Communicator: the interface through which ranks sum gradients and share state. The MPI
// implementation serves the CPU path; the NCCL one (same interface) the GPU path.
#ifndef STOKER_TRAINER_COMM_COMMUNICATOR_H_
#define STOKER_TRAINER_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "common/element_type.h"
#include "trainer/comm/collective_ledger.h"

namespace stoker::trainer {

class DeviceTimeline;  // trainer/comm/device_timeline.h

// The elements a collective reduces are an ElementType (common/element_type.h).
enum class ReduceOp { kSum, kAverage };

// Collective operations over a fixed group of ranks. Every method but the accessors is
// a collective: it must be called in the same order on every rank. Host communicators
// (MPI) work on host memory and return when the operation is done. Device communicators
// (NCCL) work on device memory: an operation is ordered after the work already enqueued
// on the calling thread's current CUDA stream, runs on the communicator's own stream, and
// Synchronize() makes the current stream wait for it (the host does not block).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Reduces `count` elements at `data` in place across all ranks (sum, or sum divided by
  // the world size); every rank gets the same bits.
  virtual absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) = 0;

  // Copies `bytes` bytes at `data` from rank `root` to every other rank.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;

  // Orders what follows (host code, or the current CUDA stream) after every operation
  // issued so far.
  virtual absl::Status Synchronize() = 0;

  // For the collective watchdog (trainer/comm/collective_watchdog.h), which calls these from its
  // own thread while collectives run; each is thread-safe.
  //
  // The record of this communicator's collectives; nullptr when it keeps none.
  virtual CollectiveLedger* ledger() { return nullptr; }
  // Device communicators: records in ledger() the operations whose work has finished since
  // the last call. Host communicators complete each operation before returning.
  virtual absl::Status PollCompletions() { return absl::OkStatus(); }
  // An error the communicator met outside any call (NCCL's ncclCommGetAsyncError: a peer
  // or the network failed), after which no collective of it can complete; OK while none.
  virtual absl::Status AsyncError() { return absl::OkStatus(); }
  // Device communicators: records in ledger() one operation that completes when the work
  // enqueued so far on the current CUDA stream has completed. A replayed CUDA graph's
  // collectives were recorded at capture, not issued; this lets the watchdog bound them.
  virtual absl::Status WatchCurrentStream() { return absl::OkStatus(); }
  // Makes the operations in flight end with an error, and every later one fail. Returns
  // false when the implementation cannot interrupt an operation in flight (a blocking MPI
  // call): then only ending the process ends the wait.
  virtual bool Abort() { return false; }
  // Device communicators: times each collective issued from now on by events recorded on
  // their stream around it, into `timeline` (borrowed; null: stops), labelled by the
  // caller's DeviceTimeline::Label before the call. Host communicators ignore it: their
  // callers time the calls, which return when the operation is done.
  virtual void set_timeline(DeviceTimeline* timeline) { (void)timeline; }
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_COMMUNICATOR_H_
