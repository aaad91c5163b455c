// MpiCommunicator: the Communicator over MPI, for buffers in host memory (the CPU path).
#ifndef STOKER_TRAINER_COMM_MPI_COMMUNICATOR_H_
#define STOKER_TRAINER_COMM_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Blocking MPI collectives on a duplicate of the given communicator, each recorded in the
// ledger (channel "MPI") before it starts and after it returns. Owned by the thread that
// makes MPI calls (the trainer's main thread); ledger() and Abort() may be called from any
// thread. Abort() cannot interrupt a blocked MPI call (MPI_THREAD_FUNNELED): it returns
// false, and the collective watchdog ends the process instead.
class MpiCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(MPI_Comm parent);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  CollectiveLedger* ledger() override { return &ledger_; }

 private:
  MpiCommunicator(MPI_Comm comm, int rank, int world_size)
      : comm_(comm), rank_(rank), world_size_(world_size) {}
  MPI_Comm comm_;
  int rank_;
  int world_size_;
  CollectiveLedger ledger_{"MPI"};
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_MPI_COMMUNICATOR_H_
