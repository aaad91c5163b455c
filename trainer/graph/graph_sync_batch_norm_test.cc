// An exported program's aten::batch_norm over 2 MPI ranks with --sync_batchnorm: the
// fused-block rewrite turns the call into a kBatchNorm call, which on each rank's part of a
// global batch gives what aten::batch_norm gives on the whole batch in one process (output,
// input gradient, running statistics; the ranks' weight and bias gradients sum to the whole
// batch's).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainer/graph/graph_call.h"
#include "trainer/graph/graph_fusion.h"
#include "trainer/nn/mpi_batch_norm_group.h"
#include "trainer/nn/sync_batch_norm.h"

namespace stoker::trainer {
namespace {

GraphArg Slot(int slot) { return GraphArg::OfSlot(slot); }
GraphArg Constant(c10::IValue value) { return GraphArg::OfConstant(std::move(value)); }

void ExpectClose(const at::Tensor& actual, const at::Tensor& expected, const char* what) {
  EXPECT_TRUE(at::allclose(actual, expected, 1e-5, 1e-5))
      << what << ": max difference " << (actual - expected).abs().max().item<double>();
}

TEST(GraphSyncBatchNormTest, ProgramBatchNormEqualsTheGlobalBatch) {
  MpiBatchNormGroup comm;
  const int rank = comm.rank(), world = comm.world_size();
  constexpr int64_t kPerRank = 3, kChannels = 5;
  constexpr double kMomentum = 0.1, kEps = 1e-5;
  at::manual_seed(3);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < world; ++r)
    parts.push_back(at::randn({kPerRank, kChannels, 4, 4}) * (1 + r) - r);
  const at::Tensor x = at::cat(parts);
  const at::Tensor dy = at::randn(x.sizes());
  const at::Tensor weight0 = at::rand({kChannels}) + 0.5, bias0 = at::randn({kChannels});
  const at::Tensor mean0 = at::zeros({kChannels}), var0 = at::ones({kChannels});

  at::Tensor x_ref = x.clone().requires_grad_();
  at::Tensor w_ref = weight0.clone().requires_grad_(), b_ref = bias0.clone().requires_grad_();
  at::Tensor rm_ref = mean0.clone(), rv_ref = var0.clone();
  at::Tensor y_ref =
      at::batch_norm(x_ref, w_ref, b_ref, rm_ref, rv_ref, true, kMomentum, kEps, false);
  (y_ref * dy).sum().backward();

  // batch_norm(x, weight, bias, running_mean, running_var, True, momentum, eps, False) -> slot 5.
  auto call = std::make_unique<GraphCall>();
  call->op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::batch_norm", "");
  call->args = {Slot(0),
                Slot(1),
                Slot(2),
                Slot(3),
                Slot(4),
                Constant(true),
                Constant(kMomentum),
                Constant(kEps),
                Constant(false)};
  call->outputs = {{5}};
  call->list_output = {false};
  std::vector<std::unique_ptr<GraphCall>> calls;
  calls.push_back(std::move(call));
  const FusedBlockCounts counts = FuseBlocks(calls, /*outside_reads=*/{5});
  ASSERT_EQ(counts.batch_norm, 1);
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0]->kind, GraphCall::Kind::kBatchNorm);

  const int64_t first = rank * kPerRank;
  at::Tensor x_mine = x.narrow(0, first, kPerRank).clone().requires_grad_();
  at::Tensor w = weight0.clone().requires_grad_(), b = bias0.clone().requires_grad_();
  at::Tensor rm = mean0.clone(), rv = var0.clone();
  std::vector<c10::IValue> values = {x_mine, w, b, rm, rv, c10::IValue()};
  GraphFrame frame{&values, c10::Device(c10::kCPU), nullptr};
  SetSyncBatchNormGroup(&comm);
  const at::Tensor y = RunFusedBlock(*calls[0], frame);
  SetSyncBatchNormGroup(nullptr);
  (y * dy.narrow(0, first, kPerRank)).sum().backward();

  ExpectClose(y, y_ref.narrow(0, first, kPerRank), "output");
  ExpectClose(x_mine.grad(), x_ref.grad().narrow(0, first, kPerRank), "input gradient");
  for (auto [mine, expected, what] : {std::make_tuple(w.grad(), w_ref.grad(), "weight gradient"),
                                      std::make_tuple(b.grad(), b_ref.grad(), "bias gradient")}) {
    at::Tensor sum = mine.clone();
    ASSERT_TRUE(comm.AllReduceSum(sum).ok());
    ExpectClose(sum, expected, what);
  }
  ExpectClose(rm, rm_ref, "running mean");
  ExpectClose(rv, rv_ref, "running variance");
}

}  // namespace
}  // namespace stoker::trainer
