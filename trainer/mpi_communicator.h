// MpiCommunicator: the Communicator over MPI, for buffers in host memory (the CPU path).
#ifndef STOKER_TRAINER_MPI_COMMUNICATOR_H_
#define STOKER_TRAINER_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/communicator.h"

namespace stoker::trainer {

// Blocking MPI collectives on a duplicate of the given communicator. Owned by the thread
// that makes MPI calls (the trainer's main thread).
class MpiCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(MPI_Comm parent);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  MpiCommunicator(MPI_Comm comm, int rank, int world_size)
      : comm_(comm), rank_(rank), world_size_(world_size) {}
  MPI_Comm comm_;
  int rank_;
  int world_size_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_MPI_COMMUNICATOR_H_
