// FusedOptimizer takes the same steps as libtorch's own SGD and AdamW (which follow
// torch.optim's update rules).
#include "trainer/fused_optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

std::vector<at::Tensor> MakeParameters() {
  at::manual_seed(11);
  return {at::randn({4, 3, 3, 3}).requires_grad_(), at::randn({7}).requires_grad_(),
          at::randn({5, 6}).requires_grad_()};
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

// Gives both parameter sets the same gradient for step `step`.
void SetGradients(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int step) {
  for (size_t i = 0; i < a.size(); ++i) {
    at::Tensor g = at::sin(at::arange(a[i].numel(), at::kFloat).reshape(a[i].sizes()) * (step + 1) + i);
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

void ExpectSame(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i << " max diff "
                                                       << (a[i] - b[i]).abs().max().item<float>();
  }
}

TEST(FusedOptimizerTest, SgdWithMomentumAndWeightDecayMatchesTorchOptim) {
  std::vector<at::Tensor> mine = MakeParameters(), reference = Clone(mine);
  OptimizerOptions options;
  options.kind = "sgd";
  options.learning_rate = 0.05;
  options.momentum = 0.9;
  options.weight_decay = 1e-3;
  auto fused = FusedOptimizer::Create(mine, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  torch::optim::SGD sgd(reference, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  for (int step = 0; step < 5; ++step) {
    SetGradients(mine, reference, step);
    (*fused)->Step();
    sgd.step();
  }
  ExpectSame(mine, reference);
}

TEST(FusedOptimizerTest, AdamWMatchesTorchOptim) {
  std::vector<at::Tensor> mine = MakeParameters(), reference = Clone(mine);
  OptimizerOptions options;
  options.kind = "adamw";
  options.learning_rate = 1e-2;
  options.weight_decay = 1e-2;
  auto fused = FusedOptimizer::Create(mine, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  torch::optim::AdamW adamw(reference, torch::optim::AdamWOptions(1e-2).weight_decay(1e-2));
  for (int step = 0; step < 5; ++step) {
    SetGradients(mine, reference, step);
    (*fused)->Step();
    adamw.step();
  }
  ExpectSame(mine, reference);
}

TEST(FusedOptimizerTest, BadHyperParametersNameTheFlag) {
  OptimizerOptions options;
  options.kind = "lamb";
  EXPECT_NE(FusedOptimizer::Create(MakeParameters(), options).status().message().find("--optimizer"),
            absl::string_view::npos);
  options.kind = "sgd";
  options.momentum = 1.5;
  EXPECT_NE(FusedOptimizer::Create(MakeParameters(), options).status().message().find("--momentum"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace stoker::trainer
