// AddLayerNorm against its composition (add, then at::layer_norm). On the CPU it is the
// composition itself; with STOKER_GPU_TEST the kernels run under bf16 autocast and are
// compared, over odd shapes, with the composition in fp64: outputs, the sum's and the
// branch's gradients, the weight and bias gradients.
#include "trainer/nn/layer_norm.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <vector>

namespace stoker::trainer {
namespace {

struct Outputs {
  torch::Tensor sum, y, dresidual, dbranch, dweight, dbias;
};

struct Inputs {
  torch::Tensor residual, branch, weight, bias, dy, dsum;
};

// Values drawn in fp32 on the CPU; the branch and dy are rounded to bf16 once, so every run
// sees the same numbers.
Inputs Draw(std::vector<int64_t> shape, bool with_branch) {
  torch::manual_seed(11);
  const int64_t width = shape.back();
  Inputs in;
  in.residual = torch::randn(shape) * 3 + 0.5;
  if (with_branch) in.branch = torch::randn(shape).to(torch::kBFloat16).to(torch::kFloat);
  in.weight = torch::rand({width}) + 0.5;
  in.bias = torch::rand({width}) - 0.5;
  in.dy = torch::randn(shape).to(torch::kBFloat16).to(torch::kFloat);
  in.dsum = with_branch ? torch::randn(shape) : torch::Tensor();
  return in;
}

// Forward and backward on `device`: the residual in fp32, the branch in `branch_dtype`.
Outputs Run(const Inputs& in, torch::Device device, torch::Dtype dtype, torch::Dtype branch_dtype,
            bool autocast) {
  auto leaf = [&](const torch::Tensor& t, torch::Dtype d) {
    return t.defined() ? t.to(device, d).requires_grad_() : torch::Tensor();
  };
  torch::Tensor residual = leaf(in.residual, dtype), branch = leaf(in.branch, branch_dtype);
  LayerNormArguments args{leaf(in.weight, dtype), leaf(in.bias, dtype), 1e-5};
  at::autocast::set_autocast_enabled(device.type(), autocast);
  if (autocast) at::autocast::set_autocast_dtype(device.type(), torch::kBFloat16);
  const auto [sum, y] = AddLayerNorm(residual, branch, args);
  at::autocast::set_autocast_enabled(device.type(), false);
  std::vector<torch::Tensor> outputs = {y}, grads = {in.dy.to(device, y.scalar_type())};
  if (branch.defined()) {
    outputs.push_back(sum);
    grads.push_back(in.dsum.to(device, sum.scalar_type()));
  }
  torch::autograd::backward(outputs, grads);
  auto host = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().to(torch::kCPU, torch::kDouble) : torch::Tensor();
  };
  return {host(sum),
          host(y),
          host(residual.grad()),
          branch.defined() ? host(branch.grad()) : torch::Tensor(),
          host(args.weight.grad()),
          host(args.bias.grad())};
}

double RelativeError(const torch::Tensor& value, const torch::Tensor& reference) {
  const double scale = reference.abs().max().item<double>();
  return (value - reference).abs().max().item<double>() / std::max(scale, 1e-30);
}

TEST(LayerNormTest, IsTheCompositionOnTheCpu) {
  for (bool with_branch : {true, false}) {
    const Inputs in = Draw({3, 5, 24}, with_branch);
    LayerNormArguments args{in.weight, in.bias, 1e-5};
    EXPECT_FALSE(FusedLayerNormApplies(in.residual, in.branch, args));
    const auto [sum, y] = AddLayerNorm(in.residual, in.branch, args);
    const torch::Tensor expected_sum = with_branch ? in.residual + in.branch : in.residual;
    EXPECT_TRUE(torch::equal(sum, expected_sum));
    EXPECT_TRUE(torch::equal(y, torch::layer_norm(expected_sum, {24}, in.weight, in.bias, 1e-5)));
  }
}

#ifdef STOKER_GPU_TEST
// Against fp64: the sum and every gradient in fp32 arithmetic (1e-4 of the largest
// magnitude: fp32 sums over up to a few thousand terms in another order); y and the
// branch's gradient are bf16, rounded once: half a bf16 unit in the last place of a value
// in [2^e, 2^(e+1)) is 2^(e-8), so up to 2^-8 of the largest magnitude beyond that.
void ExpectAccurate(std::vector<int64_t> shape, bool with_branch) {
  const Inputs in = Draw(shape, with_branch);
  const Outputs exact = Run(in, torch::kCPU, torch::kDouble, torch::kDouble, false);
  const Outputs fused = Run(in, torch::kCUDA, torch::kFloat, torch::kBFloat16, true);
  const Outputs plain_in_fp32 = Run(in, torch::kCUDA, torch::kFloat, torch::kFloat, false);
  ASSERT_EQ(fused.y.sizes(), exact.y.sizes());
  const std::vector<std::tuple<const char*, torch::Tensor, torch::Tensor, torch::Tensor, double>>
      checks = {{"y", fused.y, plain_in_fp32.y, exact.y, 1e-4 + 1.0 / 256},
                {"d residual", fused.dresidual, plain_in_fp32.dresidual, exact.dresidual, 1e-4},
                {"d weight", fused.dweight, plain_in_fp32.dweight, exact.dweight, 1e-4},
                {"d bias", fused.dbias, plain_in_fp32.dbias, exact.dbias, 1e-4}};
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + " ";
  for (const auto& [name, value, plain, reference, allowed] : checks) {
    const double error = RelativeError(value, reference);
    std::printf("  [%s] %s %s: relative error %.3g (fp32 composition %.3g, allowed %.3g)\n",
                dims.c_str(), with_branch ? "add + norm" : "norm", name, error,
                RelativeError(plain, reference), allowed);
    EXPECT_LE(error, allowed) << name;
  }
  if (with_branch) {
    const double sum_error = RelativeError(fused.sum, exact.sum);
    const double branch_error = RelativeError(fused.dbranch, exact.dbranch);
    std::printf("  [%s] add + norm sum: %.3g (allowed 1e-6), d branch: %.3g (allowed %.3g)\n",
                dims.c_str(), sum_error, branch_error, 1e-4 + 1.0 / 256);
    EXPECT_LE(sum_error, 1e-6);
    EXPECT_LE(branch_error, 1e-4 + 1.0 / 256);
  }
}

TEST(LayerNormGpuTest, MatchesTheCompositionInDouble) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 2}, {3, 7}, {5, 33}, {2, 3, 96}, {17, 1000}, {300, 768}, {2, 197, 768}, {1000, 1024}};
  for (const auto& shape : shapes) {
    for (bool with_branch : {true, false}) ExpectAccurate(shape, with_branch);
  }
}

TEST(LayerNormGpuTest, AppliesOnlyUnderBf16Autocast) {
  const Inputs in = Draw({4, 64}, true);
  LayerNormArguments args{in.weight.cuda(), in.bias.cuda(), 1e-5};
  const torch::Tensor residual = in.residual.cuda(), branch = in.branch.cuda().to(torch::kBFloat16);
  EXPECT_FALSE(FusedLayerNormApplies(residual, branch, args));
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, torch::kBFloat16);
  EXPECT_TRUE(FusedLayerNormApplies(residual, branch, args));
  EXPECT_TRUE(FusedLayerNormApplies(branch, residual, args));
  EXPECT_FALSE(FusedLayerNormApplies(residual, branch.to(torch::kHalf), args));
  LayerNormArguments one{in.weight.cuda().slice(0, 0, 1), in.bias.cuda().slice(0, 0, 1), 1e-5};
  EXPECT_FALSE(FusedLayerNormApplies(residual.slice(1, 0, 1).contiguous(), torch::Tensor(), one));
  at::autocast::set_autocast_enabled(at::kCUDA, false);
}
#endif

}  // namespace
}  // namespace stoker::trainer
