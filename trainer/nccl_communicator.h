// NcclCommunicator: the Communicator over NCCL, for buffers in device memory (the GPU
// path). The unique id travels from rank 0 over MPI_Bcast.
#ifndef STOKER_TRAINER_NCCL_COMMUNICATOR_H_
#define STOKER_TRAINER_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/communicator.h"

namespace stoker::trainer {

// Collectives run on the communicator's own high-priority stream (Note [Comm stream]).
// Each operation first makes that stream wait for the work already enqueued on the
// calling thread's current CUDA stream, so it sees the data written there; Synchronize()
// makes the current stream wait for every operation issued so far. Nothing blocks the
// host. Used by one thread at a time (the training thread, or autograd's device thread
// during backward).
class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks: rank 0 makes the unique id and broadcasts it.
  // `device` must be the current CUDA device of the calling thread.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(MPI_Comm bootstrap, int device);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Synchronize() override;

  cudaStream_t stream() const { return stream_; }

 private:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, cudaEvent_t inbound,
                   cudaEvent_t outbound, int rank, int world_size)
      : comm_(comm), stream_(stream), inbound_(inbound), outbound_(outbound),
        rank_(rank), world_size_(world_size) {}
  // Makes stream_ wait for the current stream's work so far.
  absl::Status WaitForCurrentStream();

  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t inbound_;   // recorded on the current stream, waited on by stream_
  cudaEvent_t outbound_;  // recorded on stream_, waited on by the current stream
  int rank_;
  int world_size_;
  bool failed_ = false;   // a collective failed: abort rather than destroy
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NCCL_COMMUNICATOR_H_
