// Sync batch norm over 2 MPI ranks against its definition: on each rank's part of a global
// batch it gives what plain batch norm gives on the whole batch in one process (output,
// input gradient, running statistics), and the ranks' weight and bias gradients sum to the
// whole batch's. Through SyncBatchNorm itself and through the built-in models' blocks
// (fused_blocks.h, the ATen composition on the CPU) with the group set.
#include "trainer/nn/sync_batch_norm.h"

#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/torch.h>

#include "trainer/nn/fused_blocks.h"
#include "trainer/nn/mpi_batch_norm_group.h"
#include "trainer/nn/random_batch_norm.h"

namespace stoker::trainer {
namespace {

constexpr double kTolerance = 1e-5;

void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected, const char* what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(actual, expected, kTolerance, kTolerance))
      << what << ": max difference " << (actual - expected).abs().max().item<double>();
}

// The global batch, the same on every rank: each rank's part drawn from a different
// distribution, so that the per-rank statistics differ from the global ones.
torch::Tensor GlobalBatch(int world, int64_t per_rank, int64_t channels) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < world; ++r) {
    parts.push_back(torch::randn({per_rank, channels, 5, 3}) * (1 + r) + 0.5 * r);
  }
  return torch::cat(parts);
}

// Sums `t` (fp32) over the ranks.
torch::Tensor SumOverRanks(const torch::Tensor& t, MpiBatchNormGroup& comm) {
  torch::Tensor sum = t.detach().clone().contiguous();
  EXPECT_TRUE(comm.AllReduceSum(sum).ok());
  return sum;
}

TEST(SyncBatchNormTest, EqualsBatchNormOverTheGlobalBatch) {
  MpiBatchNormGroup comm;
  const int rank = comm.rank(), world = comm.world_size();
  ASSERT_GE(world, 2);
  constexpr int64_t kPerRank = 4, kChannels = 3;
  const torch::Tensor x = GlobalBatch(world, kPerRank, kChannels);
  const torch::Tensor dy = torch::randn(x.sizes());
  const torch::Tensor weight0 = torch::rand({kChannels}) + 0.5;
  const torch::Tensor bias0 = torch::randn({kChannels});
  const torch::Tensor mean0 = torch::randn({kChannels}) * 0.1;
  const torch::Tensor var0 = torch::rand({kChannels}) + 0.5;
  constexpr double kMomentum = 0.1, kEps = 1e-5;

  // One process, the whole batch.
  torch::Tensor x_ref = x.clone().requires_grad_();
  torch::Tensor w_ref = weight0.clone().requires_grad_(), b_ref = bias0.clone().requires_grad_();
  torch::Tensor rm_ref = mean0.clone(), rv_ref = var0.clone();
  torch::Tensor y_ref = torch::batch_norm(x_ref, w_ref, b_ref, rm_ref, rv_ref, /*training=*/true,
                                          kMomentum, kEps, /*cudnn_enabled=*/false);
  (y_ref * dy).sum().backward();

  // This rank's part.
  const int64_t first = rank * kPerRank;
  torch::Tensor x_mine = x.narrow(0, first, kPerRank).clone().requires_grad_();
  torch::Tensor w = weight0.clone().requires_grad_(), b = bias0.clone().requires_grad_();
  torch::Tensor rm = mean0.clone(), rv = var0.clone();
  torch::Tensor y = SyncBatchNorm(x_mine, w, b, rm, rv, kMomentum, kEps, comm);
  (y * dy.narrow(0, first, kPerRank)).sum().backward();

  ExpectClose(y, y_ref.narrow(0, first, kPerRank), "output");
  ExpectClose(x_mine.grad(), x_ref.grad().narrow(0, first, kPerRank), "input gradient");
  ExpectClose(SumOverRanks(w.grad(), comm), w_ref.grad(), "weight gradient summed over ranks");
  ExpectClose(SumOverRanks(b.grad(), comm), b_ref.grad(), "bias gradient summed over ranks");
  ExpectClose(rm, rm_ref, "running mean");
  ExpectClose(rv, rv_ref, "running variance");
}

torch::nn::BatchNorm2d MakeBatchNorm(int64_t channels) {
  torch::manual_seed(5);
  return RandomBatchNorm(channels);
}

// The built-in models' block relu(bn(x) + residual) with the group set, against the plain
// module on the whole batch.
TEST(SyncBatchNormTest, BuiltInBlockWithTheGroupSetEqualsTheGlobalBatch) {
  MpiBatchNormGroup comm;
  const int rank = comm.rank(), world = comm.world_size();
  constexpr int64_t kPerRank = 3, kChannels = 4;
  const torch::Tensor x = GlobalBatch(world, kPerRank, kChannels);
  const torch::Tensor residual = torch::randn(x.sizes());
  const torch::Tensor dy = torch::randn(x.sizes());

  torch::nn::BatchNorm2d reference = MakeBatchNorm(kChannels);
  torch::Tensor x_ref = x.clone().requires_grad_();
  torch::Tensor y_ref = BatchNormReLU(*reference, x_ref, residual, /*fused=*/true);
  (y_ref * dy).sum().backward();

  torch::nn::BatchNorm2d mine = MakeBatchNorm(kChannels);
  const int64_t first = rank * kPerRank;
  torch::Tensor x_mine = x.narrow(0, first, kPerRank).clone().requires_grad_();
  SetSyncBatchNormGroup(&comm);
  torch::Tensor y =
      BatchNormReLU(*mine, x_mine, residual.narrow(0, first, kPerRank), /*fused=*/true);
  (y * dy.narrow(0, first, kPerRank)).sum().backward();
  // Evaluation mode stays per rank: the running statistics, no collective.
  mine->eval();
  torch::Tensor evaluated = BatchNorm(*mine, x_mine.detach(), /*fused=*/true);
  SetSyncBatchNormGroup(nullptr);

  ExpectClose(y, y_ref.narrow(0, first, kPerRank), "output");
  ExpectClose(x_mine.grad(), x_ref.grad().narrow(0, first, kPerRank), "input gradient");
  ExpectClose(SumOverRanks(mine->weight.grad(), comm), reference->weight.grad(),
              "weight gradient summed over ranks");
  ExpectClose(SumOverRanks(mine->bias.grad(), comm), reference->bias.grad(),
              "bias gradient summed over ranks");
  ExpectClose(mine->running_mean, reference->running_mean, "running mean");
  ExpectClose(mine->running_var, reference->running_var, "running variance");
  EXPECT_EQ(mine->num_batches_tracked.item<int64_t>(),
            reference->num_batches_tracked.item<int64_t>());
  reference->eval();
  ExpectClose(evaluated, reference->forward(x_mine.detach()),
              "evaluation with the running statistics");
}

}  // namespace
}  // namespace stoker::trainer
