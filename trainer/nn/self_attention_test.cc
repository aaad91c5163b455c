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

// The inputs are drawn in fp32 on the CPU whatever the run's dtype, so every run of a shape
// starts from the same numbers.
Result Run(const Shape& s, torch::Device device, torch::Dtype dtype, bool autocast, bool fused) {
  torch::manual_seed(7);
  auto draw = [&](torch::Tensor t) { return t.to(device, dtype).requires_grad_(); };
  const double bound = 1.0 / std::sqrt(static_cast<double>(s.e));
  torch::Tensor x = draw(torch::randn({s.n, s.l, s.e}));
  SelfAttentionArguments a;
  a.heads = s.heads;
  a.in_weight = draw((torch::rand({3 * s.e, s.e}) * 2 - 1) * bound);
  a.in_bias = draw(torch::rand({3 * s.e}) * 0.2 - 0.1);
  a.out_weight = draw((torch::rand({s.e, s.e}) * 2 - 1) * bound);
  a.out_bias = draw(torch::rand({s.e}) * 0.2 - 0.1);
  const torch::Tensor dy = torch::randn({s.n, s.l, s.e}).to(device, dtype);
  at::autocast::set_autocast_enabled(device.type(), autocast);
  if (autocast) at::autocast::set_autocast_dtype(device.type(), torch::kBFloat16);
  const torch::Tensor y = fused ? SelfAttention(x, a) : Decomposition(x, a);
  at::autocast::set_autocast_enabled(device.type(), false);
  at::autocast::clear_cache();
  y.backward(dy.to(y.dtype()));
  auto host = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kDouble); };
  return {host(y),
          host(x.grad()),
          host(a.in_weight.grad()),
          host(a.in_bias.grad()),
          host(a.out_weight.grad()),
          host(a.out_bias.grad())};
}

// Largest |value - reference| relative to the reference's largest magnitude.
double RelativeError(const torch::Tensor& value, const torch::Tensor& reference) {
  const double scale = reference.abs().max().item<double>();
  return (value - reference).abs().max().item<double>() / std::max(scale, 1e-30);
}

std::vector<std::pair<const char*, torch::Tensor>> Named(const Result& r) {
  return {{"y", r.y},
          {"dx", r.dx},
          {"d in_weight", r.din_w},
          {"d in_bias", r.din_b},
          {"d out_weight", r.dout_w},
          {"d out_bias", r.dout_b}};
}

void Print(const Shape& s, torch::Device device, const char* precision, const char* name,
           double error, double allowed) {
  std::printf("  N=%ld L=%ld E=%ld H=%ld %s %s %s: relative error %.3g (allowed %.3g)\n", s.n, s.l,
              s.e, s.heads, device.str().c_str(), precision, name, error, allowed);
}

// Fused against the decomposition in the same dtype, within `tolerance`.
void ExpectClose(const Shape& s, torch::Device device, torch::Dtype dtype, double tolerance) {
  const auto fused = Named(Run(s, device, dtype, false, /*fused=*/true));
  const auto plain = Named(Run(s, device, dtype, false, /*fused=*/false));
  for (size_t i = 0; i < fused.size(); ++i) {
    ASSERT_EQ(fused[i].second.sizes(), plain[i].second.sizes()) << fused[i].first;
    const double error = RelativeError(fused[i].second, plain[i].second);
    Print(s, device, c10::toString(dtype), fused[i].first, error, tolerance);
    EXPECT_LE(error, tolerance) << fused[i].first;
  }
}

// Under autocast both sides round to bf16 at the same points but may run different
// attention kernels: each is compared with the decomposition in fp64 on the CPU, and the
// fused one must be as accurate as the decomposition under autocast (its error at most 1.5x
// the decomposition's, plus 2^-9 of the largest magnitude: half a bf16 unit in the last
// place). A wrong head, layout or gradient path is off by O(1).
void ExpectAsAccurateUnderAutocast(const Shape& s, torch::Device device) {
  const auto exact = Named(Run(s, torch::kCPU, torch::kDouble, false, /*fused=*/false));
  const auto fused = Named(Run(s, device, torch::kFloat, true, /*fused=*/true));
  const auto plain = Named(Run(s, device, torch::kFloat, true, /*fused=*/false));
  for (size_t i = 0; i < exact.size(); ++i) {
    const double plain_error = RelativeError(plain[i].second, exact[i].second);
    const double allowed = 1.5 * plain_error + 1.0 / 512;
    const double error = RelativeError(fused[i].second, exact[i].second);
    Print(s, device, "autocast bf16 vs fp64", fused[i].first, error, allowed);
    EXPECT_LE(error, allowed) << fused[i].first;
  }
}

const std::vector<Shape> kShapes = {{2, 5, 8, 2}, {3, 7, 12, 3}, {1, 17, 48, 4}, {4, 50, 64, 1}};

// fp64: the same operations in another order; only rounding separates them.
TEST(SelfAttentionTest, MatchesDecompositionInDouble) {
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCPU, torch::kDouble, 1e-12);
}

TEST(SelfAttentionTest, MatchesDecompositionInFloat) {
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCPU, torch::kFloat, 1e-5);
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
  for (const Shape& s : kShapes) ExpectClose(s, torch::kCUDA, torch::kFloat, 1e-4);
  ExpectClose({8, 197, 768, 12}, torch::kCUDA, torch::kFloat, 1e-4);
}

TEST(SelfAttentionGpuTest, AsAccurateAsTheDecompositionUnderAutocast) {
  for (const Shape& s : kShapes) ExpectAsAccurateUnderAutocast(s, torch::kCUDA);
  ExpectAsAccurateUnderAutocast({8, 197, 768, 12}, torch::kCUDA);
  ExpectAsAccurateUnderAutocast({3, 49, 96, 3}, torch::kCUDA);
}
#endif

}  // namespace
}  // namespace stoker::trainer
