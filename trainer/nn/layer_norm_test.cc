// AddLayerNorm and LayerNorm against their composition (add, then at::layer_norm). On the
// CPU they are the composition itself; with STOKER_GPU_TEST the kernels run under bf16 and
// fp16 autocast and are compared, over odd shapes, with the composition in fp64 and with
// ATen's own under autocast: outputs, the input's (sum's and branch's) gradients, the weight
// and bias gradients; and a ConvNeXt stage's layer norm is timed against ATen's.
#include "trainer/nn/layer_norm.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
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
            bool autocast, torch::Dtype autocast_dtype = torch::kBFloat16) {
  auto leaf = [&](const torch::Tensor& t, torch::Dtype d) {
    return t.defined() ? t.to(device, d).requires_grad_() : torch::Tensor();
  };
  torch::Tensor residual = leaf(in.residual, dtype), branch = leaf(in.branch, branch_dtype);
  LayerNormArguments args{leaf(in.weight, dtype), leaf(in.bias, dtype), 1e-5};
  at::autocast::set_autocast_enabled(device.type(), autocast);
  if (autocast) at::autocast::set_autocast_dtype(device.type(), autocast_dtype);
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

TEST(LayerNormTest, PlainNormIsTheCompositionOnTheCpu) {
  const Inputs in = Draw({2, 3, 100}, false);
  LayerNormArguments args{in.weight, in.bias, 1e-6};
  EXPECT_FALSE(FusedLayerNormApplies(in.residual, torch::Tensor(), args));
  const torch::Tensor expected = torch::layer_norm(in.residual, {100}, in.weight, in.bias, 1e-6);
  for (LayerNormOutput output : {LayerNormOutput::kAutocastDtype, LayerNormOutput::kFloat}) {
    EXPECT_TRUE(torch::equal(LayerNorm(in.residual, args, output), expected));
    // A strided input (a permuted channels-first tensor) too.
    const torch::Tensor nchw = in.residual.permute({0, 2, 1}).contiguous().permute({0, 2, 1});
    EXPECT_TRUE(torch::allclose(LayerNorm(nchw, args, output), expected));
  }
}

#ifdef STOKER_GPU_TEST
// Against fp64: the sum and every gradient in fp32 arithmetic (1e-4 of the largest
// magnitude: fp32 sums over up to a few thousand terms in another order); y and the
// branch's gradient are bf16, rounded once: half a bf16 unit in the last place of a value
// in [2^e, 2^(e+1)) is 2^(e-8), so up to 2^-8 of the largest magnitude beyond that.
// (fp16: 2^-11 instead of 2^-8.)
void ExpectAccurate(std::vector<int64_t> shape, bool with_branch,
                    torch::Dtype low = torch::kBFloat16) {
  const Inputs in = Draw(shape, with_branch);
  const Outputs exact = Run(in, torch::kCPU, torch::kDouble, torch::kDouble, false);
  const Outputs fused = Run(in, torch::kCUDA, torch::kFloat, low, true, low);
  const double rounding = low == torch::kHalf ? 1.0 / 2048 : 1.0 / 256;
  const Outputs plain_in_fp32 = Run(in, torch::kCUDA, torch::kFloat, torch::kFloat, false);
  ASSERT_EQ(fused.y.sizes(), exact.y.sizes());
  const std::vector<std::tuple<const char*, torch::Tensor, torch::Tensor, torch::Tensor, double>>
      checks = {{"y", fused.y, plain_in_fp32.y, exact.y, 1e-4 + rounding},
                {"d residual", fused.dresidual, plain_in_fp32.dresidual, exact.dresidual, 1e-4},
                {"d weight", fused.dweight, plain_in_fp32.dweight, exact.dweight, 1e-4},
                {"d bias", fused.dbias, plain_in_fp32.dbias, exact.dbias, 1e-4}};
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + " ";
  for (const auto& [name, value, plain, reference, bound] : checks) {
    const double error = RelativeError(value, reference);
    // Over a row of two values the input's gradient is a cancellation near zero (the
    // normalised row is +-1 whatever the input): there ATen's own fp32 composition misses
    // fp64 by far more than 1e-4, and the kernel is held to twice ATen's error instead.
    const double composition = RelativeError(plain, reference);
    const double allowed = std::max(bound, 2 * composition);
    std::printf("  [%s] %s %s %s: relative error %.3g (fp32 composition %.3g, allowed %.3g)\n",
                dims.c_str(), c10::toString(low), with_branch ? "add + norm" : "norm", name, error,
                composition, allowed);
    EXPECT_LE(error, allowed) << name;
  }
  if (with_branch) {
    const double sum_error = RelativeError(fused.sum, exact.sum);
    const double branch_error = RelativeError(fused.dbranch, exact.dbranch);
    std::printf("  [%s] %s add + norm sum: %.3g (allowed 1e-6), d branch: %.3g (allowed %.3g)\n",
                dims.c_str(), c10::toString(low), sum_error, branch_error, 1e-4 + rounding);
    EXPECT_LE(sum_error, 1e-6);
    EXPECT_LE(branch_error, 1e-4 + rounding);
  }
}

TEST(LayerNormGpuTest, MatchesTheCompositionInDouble) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 2}, {3, 7}, {5, 33}, {2, 3, 96}, {17, 1000}, {300, 768}, {2, 197, 768}, {1000, 1024}};
  for (const auto& shape : shapes) {
    for (bool with_branch : {true, false}) ExpectAccurate(shape, with_branch);
  }
  for (bool with_branch : {true, false}) ExpectAccurate({300, 768}, with_branch, torch::kHalf);
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
  // Without the add: fp32 or the autocast dtype, in any layout.
  EXPECT_TRUE(FusedLayerNormApplies(branch, torch::Tensor(), args));
  EXPECT_TRUE(FusedLayerNormApplies(branch.t().contiguous().t(), torch::Tensor(), args));
  EXPECT_FALSE(FusedLayerNormApplies(branch.to(torch::kHalf), torch::Tensor(), args));
  at::autocast::set_autocast_dtype(at::kCUDA, torch::kHalf);
  EXPECT_TRUE(FusedLayerNormApplies(branch.to(torch::kHalf), torch::Tensor(), args));
  EXPECT_TRUE(FusedLayerNormApplies(residual, branch.to(torch::kHalf), args));
  at::autocast::set_autocast_dtype(at::kCUDA, torch::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  EXPECT_FALSE(FusedLayerNormApplies(branch, torch::Tensor(), args));
}

// One plain layer norm's forward and backward on the GPU, from a leaf in `x_dtype`.
struct NormRun {
  torch::Tensor y, dx, dweight, dbias;  // on the host, in fp64
  torch::Dtype y_dtype, dx_dtype;
};

// With `fused`, LayerNorm under autocast in `low`; otherwise ATen's composition under the
// same autocast: at::layer_norm (fp32 out), cast to `low` where the readers would cast.
NormRun RunNorm(const Inputs& in, torch::Dtype x_dtype, torch::Dtype low, LayerNormOutput output,
                bool fused) {
  torch::Tensor x = in.residual.to(torch::kCUDA, x_dtype).requires_grad_();
  LayerNormArguments args{in.weight.cuda().requires_grad_(), in.bias.cuda().requires_grad_(), 1e-6};
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, low);
  EXPECT_EQ(FusedLayerNormApplies(x, torch::Tensor(), args), true);
  torch::Tensor y;
  if (fused) {
    y = LayerNorm(x, args, output);
  } else {
    y = at::layer_norm(x, {x.size(-1)}, args.weight, args.bias, args.eps);
    if (output == LayerNormOutput::kAutocastDtype) y = y.to(low);
  }
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  const auto grads = torch::autograd::grad({y}, {x, args.weight, args.bias},
                                           {in.dy.to(torch::kCUDA, y.scalar_type())});
  auto host = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kDouble); };
  return {host(y),        host(grads[0]),  host(grads[1]),
          host(grads[2]), y.scalar_type(), grads[0].scalar_type()};
}

// A layer norm of an input in the autocast dtype (ConvNeXt's blocks, Swin-V2's post-norm)
// against fp64 and against ATen's composition under autocast, which casts the input to fp32.
// Against fp64: an output or input gradient in fp16/bf16 is rounded once, half a unit in the
// last place: for a value in [2^e, 2^(e+1)) that is 2^(e-8) (bf16; 2^(e-11) for fp16), so up
// to 2^-8 (2^-11) of the largest magnitude (ATen's composition measures up to 0.0033 in bf16
// where 2^-9 would be 0.00195), plus 1e-4 for the fp32
// arithmetic in another order; in fp32 1e-4 alone; the weight and bias gradients (fp32 sums
// over up to 10^4 rows of products of exactly representable values) 1e-4. Against ATen: the
// two round independently, so one unit in the last place apart (twice the above) plus 1e-4.
void ExpectPlainAccurate(std::vector<int64_t> shape, torch::Dtype low, LayerNormOutput output) {
  Inputs in = Draw(shape, false);
  in.residual = in.residual.to(low).to(torch::kFloat);  // exactly representable in `low`
  in.dy = in.dy.to(low).to(torch::kFloat);
  const torch::Tensor exact_x = in.residual.to(torch::kDouble).requires_grad_();
  const torch::Tensor w = in.weight.to(torch::kDouble).requires_grad_();
  const torch::Tensor b = in.bias.to(torch::kDouble).requires_grad_();
  const torch::Tensor exact_y = torch::layer_norm(exact_x, {shape.back()}, w, b, 1e-6);
  const auto exact = torch::autograd::grad({exact_y}, {exact_x, w, b}, {in.dy.to(torch::kDouble)});
  const NormRun fused = RunNorm(in, low, low, output, true);
  const NormRun aten = RunNorm(in, low, low, output, false);
  const torch::Dtype y_dtype = output == LayerNormOutput::kAutocastDtype ? low : torch::kFloat;
  EXPECT_EQ(fused.y_dtype, y_dtype);
  EXPECT_EQ(fused.dx_dtype, low);
  EXPECT_EQ(aten.dx_dtype, low);
  const double half_unit = low == torch::kHalf ? 1.0 / 2048 : 1.0 / 256;
  const double y_allowed = 1e-4 + (y_dtype == torch::kFloat ? 0 : half_unit);
  const double dx_allowed = 1e-4 + half_unit;
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + " ";
  const std::vector<std::tuple<const char*, torch::Tensor, torch::Tensor, torch::Tensor, double>>
      checks = {{"y", fused.y, aten.y, exact_y.detach(), y_allowed},
                {"d x", fused.dx, aten.dx, exact[0], dx_allowed},
                {"d weight", fused.dweight, aten.dweight, exact[1], 1e-4},
                {"d bias", fused.dbias, aten.dbias, exact[2], 1e-4}};
  for (const auto& [name, value, reference, ideal, allowed] : checks) {
    const double error = RelativeError(value, ideal);
    const double aten_error = RelativeError(reference, ideal);
    const double apart = RelativeError(value, reference);
    const double apart_allowed = 2 * allowed - 1e-4;
    std::printf(
        "  [%s] %s in, %s out, %s: relative error %.3g (ATen under autocast %.3g, allowed %.3g); "
        "fused vs ATen %.3g (allowed %.3g)\n",
        dims.c_str(), c10::toString(low), c10::toString(y_dtype), name, error, aten_error, allowed,
        apart, apart_allowed);
    EXPECT_LE(error, allowed) << dims << name;
    EXPECT_LE(apart, apart_allowed) << dims << name;
  }
}

TEST(LayerNormGpuTest, LowPrecisionInputMatchesAtenUnderAutocast) {
  // ConvNeXt-T's and Swin-V2-T's widths, one not a multiple of 8, and tiny ones.
  const std::vector<std::vector<int64_t>> shapes = {{8, 96},     {3, 5, 192}, {7, 384},
                                                    {2, 9, 768}, {33, 100},   {5, 7},
                                                    {1, 3},      {4000, 96},  {64, 1000}};
  for (torch::Dtype low : {torch::kBFloat16, torch::kHalf}) {
    for (LayerNormOutput output : {LayerNormOutput::kAutocastDtype, LayerNormOutput::kFloat}) {
      for (const auto& shape : shapes) ExpectPlainAccurate(shape, low, output);
    }
  }
}

TEST(LayerNormGpuTest, Fp32InputWithFp32OutputMatchesAten) {
  Inputs in = Draw({50, 384}, false);
  in.dy = in.dy.to(torch::kFloat);
  const NormRun fused = RunNorm(in, torch::kFloat, torch::kBFloat16, LayerNormOutput::kFloat, true);
  const NormRun aten = RunNorm(in, torch::kFloat, torch::kBFloat16, LayerNormOutput::kFloat, false);
  EXPECT_EQ(fused.y_dtype, torch::kFloat);
  EXPECT_EQ(fused.dx_dtype, torch::kFloat);
  // fp32 arithmetic in another order.
  for (const auto& [name, value, reference] :
       std::vector<std::tuple<const char*, torch::Tensor, torch::Tensor>>{
           {"y", fused.y, aten.y},
           {"d x", fused.dx, aten.dx},
           {"d weight", fused.dweight, aten.dweight},
           {"d bias", fused.dbias, aten.dbias}}) {
    const double apart = RelativeError(value, reference);
    std::printf("  [50 384] fp32 in, fp32 out, %s: fused vs ATen %.3g (allowed 1e-5)\n", name,
                apart);
    EXPECT_LE(apart, 1e-5) << name;
  }
}

// Milliseconds per call of `step`, after warm-up, on the current stream.
double MillisecondsPerCall(const std::function<void()>& step, int calls) {
  for (int i = 0; i < 3; ++i) step();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) step();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         calls;
}

// ConvNeXt-T's first stage at batch 256: each block norms the depthwise convolution's bf16
// output, [256, 56, 56, 96] channels-last, and a linear layer reads it.
TEST(LayerNormGpuTest, ConvNeXtStageOneShapeIsFasterFused) {
  const int64_t rows = 256 * 56 * 56, width = 96;
  torch::manual_seed(3);
  const torch::Tensor x =
      torch::randn({rows, width}, torch::dtype(torch::kBFloat16).device(torch::kCUDA))
          .requires_grad_();
  const torch::Tensor dy = torch::randn_like(x);
  LayerNormArguments args{torch::ones({width}, torch::device(torch::kCUDA)).requires_grad_(),
                          torch::zeros({width}, torch::device(torch::kCUDA)).requires_grad_(),
                          1e-6};
  auto step = [&](bool fused) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, torch::kBFloat16);
    torch::Tensor y =
        fused ? LayerNorm(x, args, LayerNormOutput::kAutocastDtype)
              : at::layer_norm(x, {width}, args.weight, args.bias, args.eps).to(torch::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    torch::autograd::grad({y}, {x, args.weight, args.bias}, {dy});
  };
  const double fused_ms = MillisecondsPerCall([&] { step(true); }, 20);
  const double aten_ms = MillisecondsPerCall([&] { step(false); }, 20);
  std::printf(
      "  layer norm [%lld, %lld] bf16 in and out, forward + backward: fused %.3f ms, ATen under "
      "autocast (casts included) %.3f ms, %.2fx\n",
      static_cast<long long>(rows), static_cast<long long>(width), fused_ms, aten_ms,
      aten_ms / fused_ms);
  EXPECT_LT(fused_ms, aten_ms);
}
#endif

}  // namespace
}  // namespace stoker::trainer
