// MpiBatchNormGroup: a BatchNormGroup over an MPI communicator, for tests of sync batch norm
// on CPU ranks (the run itself adapts its gradient communicator instead).
#ifndef STOKER_TRAINER_NN_MPI_BATCH_NORM_GROUP_H_
#define STOKER_TRAINER_NN_MPI_BATCH_NORM_GROUP_H_

#include <mpi.h>

#include "trainer/nn/sync_batch_norm.h"

namespace stoker::trainer {

// Sums CPU fp32 tensors with MPI_Allreduce. Owned by one thread; MPI must be initialised.
class MpiBatchNormGroup final : public BatchNormGroup {
 public:
  explicit MpiBatchNormGroup(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {}

  absl::Status AllReduceSum(torch::Tensor& t) override;
  int rank() const;
  int world_size() const;

 private:
  MPI_Comm comm_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_MPI_BATCH_NORM_GROUP_H_
