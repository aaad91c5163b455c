#include "trainer/nn/mpi_batch_norm_group.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::Status MpiBatchNormGroup::AllReduceSum(torch::Tensor& t) {
  if (!t.device().is_cpu() || t.scalar_type() != torch::kFloat || !t.is_contiguous()) {
    return absl::InvalidArgumentError("MpiBatchNormGroup sums contiguous CPU fp32 tensors only");
  }
  const int rc = MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT,
                               MPI_SUM, comm_);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Allreduce failed: ", rc));
  return absl::OkStatus();
}

int MpiBatchNormGroup::rank() const {
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  return rank;
}

int MpiBatchNormGroup::world_size() const {
  int size = 1;
  MPI_Comm_size(comm_, &size);
  return size;
}

}  // namespace stoker::trainer
