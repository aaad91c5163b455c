// Sync batch norm: training-mode batch norm whose statistics are those of the step's
// global batch, over every rank of a communicator, as torch.nn.SyncBatchNorm computes them,
// and the process-wide switch (--sync_batchnorm) that routes the built-in models' batch
// norm blocks (trainer/nn/fused_blocks.h) and exported programs' fused batch norm calls
// (trainer/graph/graph_fusion.h) through it.
//
// Note [Sync batch norm]: forward, each rank sums x and x*x per channel and counts its
// elements; one allreduce (sum) of the 2C+1 floats gives the global mean and the biased
// global variance, with which each rank normalises its own part; the running variance moves
// towards the unbiased global variance (count / (count - 1)). Backward, each rank sums dy and
// dy * xhat per channel; one allreduce of the 2C floats gives the global sums, from which dx
// is computed locally:
//   dx = weight * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count).
// The weight and bias gradients are the rank's own sums (its part of the global ones), as
// in torch.nn.SyncBatchNorm: the gradient buckets then average them like every other
// gradient. Everything is ATen on the tensor's device (the statistics in fp32); on the GPU
// the allreduces run on the device communicator and nothing waits on the host.
#ifndef STOKER_TRAINER_NN_SYNC_BATCH_NORM_H_
#define STOKER_TRAINER_NN_SYNC_BATCH_NORM_H_

#include <torch/types.h>

#include "absl/status/status.h"

namespace stoker::trainer {

// The ranks a batch norm synchronises over. nn/ knows no communicator: the run adapts its
// gradient communicator to this (trainer/training_model.cc), tests an MPI communicator of
// their own (mpi_batch_norm_group.h).
class BatchNormGroup {
 public:
  virtual ~BatchNormGroup() = default;
  // Sums `t` (fp32, contiguous, on the model's device) over every rank of the group, in
  // place; the sum is complete when it returns, in the order of `t`'s stream. Must be
  // called in the same order on every rank.
  virtual absl::Status AllReduceSum(torch::Tensor& t) = 0;
};

// Training-mode batch norm of `x` [N, C, ...] over the ranks of `group`: Note [Sync batch
// norm]. `weight` and `bias` may be undefined (no affine); the running statistics, when
// defined (fp32), move in place by `momentum`; counting num_batches_tracked stays with the
// caller, as in aten::batch_norm. Differentiable in x, weight and bias. Two collectives on
// `group` per call (one in forward, one in backward): every rank must run the same batch
// norms in the same order, as the same model's forward and backward do. Throws c10::Error
// when a collective fails.
torch::Tensor SyncBatchNorm(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, const torch::Tensor& running_mean,
                            const torch::Tensor& running_var, double momentum, double eps,
                            BatchNormGroup& group);

// The group that training-mode batch norm of the built-in blocks and of exported
// programs synchronises over; nullptr (the default) keeps batch norm per rank. Set by the
// training model before the first step (--sync_batchnorm); the group must outlive its use. Not
// thread-safe against running forward passes: set it before they start.
void SetSyncBatchNormGroup(BatchNormGroup* group);
BatchNormGroup* SyncBatchNormGroup();

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_SYNC_BATCH_NORM_H_
