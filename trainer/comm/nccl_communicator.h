// NcclCommunicator: the Communicator over NCCL, for buffers in device memory (the GPU
// path). The unique id travels from rank 0 over MPI_Bcast.
#ifndef STOKER_TRAINER_COMM_NCCL_COMMUNICATOR_H_
#define STOKER_TRAINER_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cuda_stream.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Collectives run on the communicator's own high-priority stream (Note [Comm stream]).
// Each operation first makes that stream wait for the work already enqueued on the
// calling thread's current CUDA stream, so it sees the data written there; Synchronize()
// makes the current stream wait for every operation issued so far. Nothing blocks the
// host. Used by one thread at a time (the training thread, or autograd's device thread
// during backward); ledger(), PollCompletions() and Abort() may be called from any thread
// (the collective watchdog's). Each operation is recorded in the ledger (channel "NCCL")
// when it is enqueued and completed once an event recorded after it on the stream has
// passed (Note [NCCL completion events]). An operation enqueued while the current stream
// is being captured into a CUDA graph is recorded and completed at once (it runs only when
// the graph is replayed; WatchCurrentStream then tracks the replay).
class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks: rank 0 makes the unique id and broadcasts it.
  // `device` must be the current CUDA device of the calling thread. Every rank must reach
  // the broadcast within `deadline` (DeadlineExceeded naming those that did not), and the
  // broadcast, ncclCommInitRank and, at the end, the destructor's stream sync and
  // ncclCommDestroy must each return within it, or the process exits 124 (Note [Start-up
  // and teardown deadlines] in launcher/rank/phase_deadline.h). Must be called in the same order
  // on every rank.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      MPI_Comm bootstrap, int device, absl::Duration deadline = absl::Seconds(300));
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Synchronize() override;
  CollectiveLedger* ledger() override { return &ledger_; }
  absl::Status PollCompletions() override;
  absl::Status WatchCurrentStream() override;
  // ncclCommGetAsyncError: Unavailable once NCCL has met an error outside a call.
  absl::Status AsyncError() override;
  // ncclCommAbort: kernels in flight end, later calls fail. Returns true.
  bool Abort() override;
  // Events around each collective on stream() (Note [Comm stream]); the calling thread's.
  void set_timeline(DeviceTimeline* timeline) override { timeline_ = timeline; }

  cudaStream_t stream() const { return stream_.get(); }

 private:
  NcclCommunicator(CudaStream stream, CudaEvent inbound, CudaEvent outbound, ncclComm_t comm,
                   int device, int rank, int world_size)
      : stream_(std::move(stream)),
        inbound_(std::move(inbound)),
        outbound_(std::move(outbound)),
        comm_(comm),
        device_(device),
        rank_(rank),
        world_size_(world_size) {}
  // Makes stream_ wait for the current stream's work so far.
  absl::Status WaitForCurrentStream();
  // Records on `stream` the event that completes operation `seq` in the ledger; completes
  // it at once when `enqueued` failed or when `stream` is being captured.
  void TrackCompletion(uint64_t seq, const absl::Status& enqueued, cudaStream_t stream);

  // In dependency order: the stream, the events recorded on it, the NCCL communicator
  // that enqueues on it (destroyed or aborted first, by the destructor's body).
  CudaStream stream_;
  CudaEvent inbound_;   // recorded on the current stream, waited on by stream_
  CudaEvent outbound_;  // recorded on stream_, waited on by the current stream
  ncclComm_t comm_;
  int device_;
  int rank_;
  int world_size_;
  bool failed_ = false;  // a collective failed: abort rather than destroy
  absl::Duration teardown_timeout_ = absl::Seconds(300);  // Create()'s deadline
  // Held while an operation is enqueued and while Abort() runs, so that no call reaches a
  // communicator that ncclCommAbort freed.
  absl::Mutex comm_mu_;
  std::atomic<bool> aborted_{false};  // ncclCommAbort was called
  CollectiveLedger ledger_{"NCCL"};
  absl::Mutex events_mu_;
  // Operations enqueued and not yet seen complete, oldest first, with their events.
  std::deque<std::pair<uint64_t, CudaEvent>> in_flight_ ABSL_GUARDED_BY(events_mu_);
  std::vector<CudaEvent> free_events_ ABSL_GUARDED_BY(events_mu_);
  DeviceTimeline* timeline_ = nullptr;  // set_timeline's; used by the issuing thread
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_NCCL_COMMUNICATOR_H_
