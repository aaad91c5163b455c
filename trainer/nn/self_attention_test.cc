// SelfAttention against the decomposition torch.export records for a batch-first
// nn.MultiheadAttention (transpose, packed projection, contiguous [3, L, N, E], views,
// scaled_dot_product_attention, permute, out-projection, transpose back): output and the
// gradients of the input and of all four parameters, on odd shapes. On the CPU in fp64 and
// fp32; with STOKER_GPU_TEST also on the GPU in fp32 and under bf16 autocast.
#include "trainer/nn/self_attention.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

namespace stoker::trainer {
namespace {

struct Shape {
  int64_t n, l, e, heads;
};

struct Result {
  torch::Tensor y, dx, din_w, din_b, dout_w, dout_b;
};

// What the exported program computes, op for op.
torch::Tensor Decomposition(const torch::Tensor& x, const SelfAttentionArguments& a) {
  const int64_t n = x.size(0), l = x.size(1), e = x.size(2), h = a.heads, d = e / h;
  const torch::Tensor proj = torch::linear(x.transpose(1, 0), a.in_weight, a.in_bias);
  const torch::Tensor packed =
      proj.unflatten(-1, {3, e}).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous();
  std::vector<torch::Tensor> heads;
  for (int64_t i = 0; i < 3; ++i)
    heads.push_back(packed.select(0, i).view({l, n * h, d}).transpose(0, 1).view({n, h, l, d}));
  const torch::Tensor attended =
      at::scaled_dot_product_attention(heads[0], heads[1], heads[2], std::nullopt, 0.0, false);
  const torch::Tensor merged = attended.permute({2, 0, 1, 3}).reshape({l * n, e});
  return torch::linear(merged, a.out_weight, a.out_bias).view({l, n, e}).transpose(1, 0);
}

Result Run(const Shape& s, torch::Device device, torch::Dtype dtype, bool autocast, bool fused) {
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().dtype(dtype);
  torch::Tensor x = torch::randn({s.n, s.l, s.e}, opts).to(device).requires_grad_();
  SelfAttentionArguments a;
  a.heads = s.heads;
  const double bound = 1.0 / std::sqrt(static_cast<double>(s.e));
  a.in_weight = (torch::rand({3 * s.e, s.e}, opts) * 2 - 1).mul(bound).to(device).requires_grad_();
  a.in_bias = (torch::rand({3 * s.e}, opts) * 0.2 - 0.1).to(device).requires_grad_();
  a.out_weight = (torch::rand({s.e, s.e}, opts) * 2 - 1).mul(bound).to(device).requires_grad_();
  a.out_bias = (torch::rand({s.e}, opts) * 0.2 - 0.1).to(device).requires_grad_();
  const torch::Tensor dy = torch::randn({s.n, s.l, s.e}, opts).to(device);
  at::autocast::set_autocast_enabled(device.type(), autocast);
  if (autocast) at::autocast::set_autocast_dtype(device.type(), torch::kBFloat16);
  const torch::Tensor y = fused ? SelfAttention(x, a) : Decomposition(x, a);
  at::autocast::set_autocast_enabled(device.type(), false);
  at::autocast::clear_cache();
  y.backward(dy.to(y.dtype()));
  return {y.detach().to(torch::kCPU, torch::kDouble),
          x.grad().to(torch::kCPU, torch::kDouble),
          a.in_weight.grad().to(torch::kCPU, torch::kDouble),
          a.in_bias.grad().to(torch::kCPU, torch::kDouble),
          a.out_weight.grad().to(torch::kCPU, torch::kDouble),
          a.out_bias.grad().to(torch::kCPU, torch::kDouble)};
}

// Largest |fused - decomposition| relative to the decomposition's largest magnitude.
double RelativeError(const torch::Tensor& fused, const torch::Tensor& reference) {
  const double scale = reference.abs().max().item<double>();
  return (fused - reference).abs().max().item<double>() / std::max(scale, 1e-30);
}

void ExpectClose(const Shape& s, torch::Device device, torch::Dtype dtype, bool autocast,
                 double tolerance) {
  const Result fused = Run(s, device, dtype, autocast, /*fused=*/true);
  const Result plain = Run(s, device, dtype, autocast, /*fused=*/false);
  EXPECT_TRUE(fused.y.sizes() == plain.y.sizes());
  const std::vector<std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>>> checks = {
      {"y", {fused.y, plain.y}},
      {"dx", {fused.dx, plain.dx}},
      {"d in_weight", {fused.din_w, plain.din_w}},
      {"d in_bias", {fused.din_b, plain.din_b}},
      {"d out_weight", {fused.dout_w, plain.dout_w}},
      {"d out_bias", {fused.dout_b, plain.dout_b}}};
  for (const auto& [name, pair] : checks) {
    const double error = RelativeError(pair.first, pair.second);
    std::printf("  N=%ld L=%ld E=%ld H=%ld %s %s%s: %s relative error %.3g (tolerance %.3g)\n", s.n,
                s.l, s.e, s.heads, device.str().c_str(), c10::toString(dtype),
                autocast ? " autocast bf16" : "", name, error, tolerance);
    EXPECT_LE(error, tolerance) << name;
  }
}

const std::vector<Shape> kShapes = {{2, 5, 8, 2}, {3, 7, 12, 3}, {1, 17, 48, 4}, {4, 50, 64, 1}};

// fp64: the same operations in another order; only rounding separates them.
TEST(SelfAttentionTest, MatchesDecompositionInDouble) {
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCPU, torch::kDouble, false, 1e-12);
}

TEST(SelfAttentionTest, MatchesDecompositionInFloat) {
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCPU, torch::kFloat, false, 1e-5);
}

TEST(SelfAttentionTest, HeadsAreViewsOfThePackedProjection) {
  const torch::Tensor packed = torch::randn({2, 5, 3 * 12});
  const std::vector<torch::Tensor> qkv = SplitHeads(packed, 3);
  ASSERT_EQ(qkv.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(qkv[i].sizes(), torch::IntArrayRef({2, 3, 5, 4}));
    EXPECT_EQ(qkv[i].storage().data(), packed.storage().data());
    EXPECT_EQ(qkv[i].stride(3), 1);
    const torch::Tensor expected =
        packed.narrow(2, i * 12, 12).reshape({2, 5, 3, 4}).permute({0, 2, 1, 3});
    EXPECT_TRUE(torch::equal(qkv[i], expected));
  }
}

#ifdef STOKER_GPU_TEST
// fp32 with TF32 off: the same kernels up to the attention backend's choice.
TEST(SelfAttentionGpuTest, MatchesDecompositionInFloat) {
  at::globalContext().setAllowTF32CuBLAS(false);
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCUDA, torch::kFloat, false, 1e-4);
  ExpectClose({8, 197, 768, 12}, torch::kCUDA, torch::kFloat, false, 1e-4);
}

// Under bf16 autocast both sides round every product to bf16 (8 bits of mantissa): 2^-7 of
// the largest magnitude covers a few roundings, where a wrong head or layout is off by O(1).
TEST(SelfAttentionGpuTest, MatchesDecompositionUnderAutocast) {
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCUDA, torch::kFloat, true, 1.0 / 128);
  ExpectClose({8, 197, 768, 12}, torch::kCUDA, torch::kFloat, true, 1.0 / 128);
  ExpectClose({3, 49, 96, 3}, torch::kCUDA, torch::kFloat, true, 1.0 / 128);
}
#endif

}  // namespace
}  // namespace stoker::trainer
