// Tests of Fp8Linear (Note [FP8 linear layers]). On the CPU: it is at::linear itself, and
// the recipe's limits are checked. With STOKER_GPU_TEST, on a GPU of compute capability 8.9
// or newer: outputs and gradients against fp32 and bf16 linears, the scales following the
// amaxes over calls, the shapes that fall back or need padding, and a forward and backward
// captured as a CUDA graph and replayed.
#include "trainer/nn/fp8_linear.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#ifdef STOKER_GPU_TEST
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace stoker::trainer {
namespace {

TEST(Fp8LinearTest, WeightsFitWhenBothSidesAreMultiplesOf16) {
  EXPECT_TRUE(Fp8WeightFits({768, 2304}));
  EXPECT_TRUE(Fp8WeightFits({16, 16}));
  EXPECT_FALSE(Fp8WeightFits({10, 768}));   // a 10-class head
  EXPECT_FALSE(Fp8WeightFits({768, 100}));  // in features
  EXPECT_FALSE(Fp8WeightFits({768}));
  EXPECT_FALSE(Fp8WeightFits({0, 16}));
}

TEST(Fp8LinearTest, OnTheCpuItIsTheLinearItself) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({2, 5, 32}, torch::requires_grad());
  const torch::Tensor w = torch::randn({48, 32}, torch::requires_grad());
  const torch::Tensor b = torch::randn({48}, torch::requires_grad());
  auto state = c10::make_intrusive<Fp8LinearState>();
  EXPECT_FALSE(Fp8LinearApplies(x, w, b));
  const torch::Tensor y = Fp8Linear(x, w, b, state);
  EXPECT_TRUE(torch::equal(y, torch::nn::functional::linear(x, w, b)));
  EXPECT_EQ(state->fp8_calls(), 0);
  EXPECT_FALSE(state->scale(Fp8Role::kInput).defined());
}

TEST(Fp8LinearTest, RecipeLimitsAreChecked) {
  EXPECT_THROW(Fp8LinearState(Fp8Recipe{0, 0, false}), c10::Error);
  EXPECT_THROW(Fp8LinearState(Fp8Recipe{1025, 0, false}), c10::Error);
  EXPECT_THROW(Fp8LinearState(Fp8Recipe{16, -1, false}), c10::Error);
  EXPECT_NO_THROW(Fp8LinearState(Fp8Recipe{1024, 2, true}));
}

#ifdef STOKER_GPU_TEST
// ||a - b|| / ||b||, in double.
double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor ad = a.to(torch::kCPU, torch::kDouble),
                      bd = b.to(torch::kCPU, torch::kDouble);
  return (ad - bd).norm().item<double>() / std::max(bd.norm().item<double>(), 1e-30);
}

void RequireFp8Gpu() {
  ASSERT_TRUE(torch::cuda::is_available()) << "the FP8 GPU tests need a GPU";
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  ASSERT_TRUE(major > 8 || (major == 8 && minor >= 9))
      << "the FP8 GPU tests need compute capability 8.9 or newer, GPU 0 has " << major << "."
      << minor;
}

class Bf16Autocast {
 public:
  Bf16Autocast() {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, torch::kBFloat16);
  }
  ~Bf16Autocast() {
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  }
};

struct Result {
  torch::Tensor y, dx, dw, db;
};

// y = linear(x, w, b) and the gradients of sum(y * dy), x bf16 as a transformer's layer
// norm gives it, w and b fp32 masters. `state` null: autocast's bf16 linear; else FP8.
Result RunLinear(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                 const torch::Tensor& dy, const c10::intrusive_ptr<Fp8LinearState>& state) {
  torch::Tensor x = x0.detach().clone().requires_grad_(true);
  torch::Tensor w = w0.detach().clone().requires_grad_(true);
  torch::Tensor b = b0.detach().clone().requires_grad_(true);
  torch::Tensor y;
  {
    Bf16Autocast autocast;
    y = state ? Fp8Linear(x, w, b, state) : torch::nn::functional::linear(x, w, b);
  }
  y.backward(dy.to(y.scalar_type()));
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// fp32 on the GPU, no autocast: the reference.
Result Exact(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
             const torch::Tensor& dy) {
  torch::Tensor x = x0.detach().to(torch::kFloat).requires_grad_(true);
  torch::Tensor w = w0.detach().clone().requires_grad_(true);
  torch::Tensor b = b0.detach().clone().requires_grad_(true);
  torch::Tensor y = torch::nn::functional::linear(x, w, b);
  y.backward(dy.to(torch::kFloat));
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

struct Inputs {
  torch::Tensor x, w, b, dy;
};

// Activations of unit scale, weights as initialised (std 0.02), gradients of a mean loss
// (std 1e-4): the magnitudes of a ViT's layers.
Inputs Draw(std::vector<int64_t> x_shape, int64_t out, uint64_t seed) {
  torch::manual_seed(seed);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  Inputs in;
  in.x = torch::randn(x_shape, cuda).to(torch::kBFloat16);
  in.w = torch::randn({out, x_shape.back()}, cuda) * 0.02;
  in.b = torch::randn({out}, cuda) * 0.1;
  std::vector<int64_t> y_shape = x_shape;
  y_shape.back() = out;
  in.dy = (torch::randn(y_shape, cuda) * 1e-4).to(torch::kBFloat16);
  return in;
}

// Bounds, as ||fp8 - fp32|| / ||fp32||. Rounding to e4m3 (3 mantissa bits) leaves a relative
// error of at most 2^-4 per value and about 2.5% RMS over values spread across a binade; a
// product of two such operands about 3.5%, and a sum of many independent products the same
// relative RMS: 0.08 allows twice that. e5m2 (2 mantissa bits) doubles one operand's error
// (about 5% RMS, 6% with the e4m3 operand): 0.12 for dx and dW with e5m2 gradients. The bias
// gradient is a fp32 sum of the bf16 gradient: bf16's 2^-9 relative rounding, 0.01.
constexpr double kForwardBound = 0.08;
constexpr double kE5M2GradientBound = 0.12;
constexpr double kE4M3GradientBound = 0.08;
constexpr double kBiasBound = 0.01;

TEST(Fp8LinearGpuTest, OutputsAndGradientsTrackTheFp32Linear) {
  RequireFp8Gpu();
  struct Shape {
    std::vector<int64_t> x;
    int64_t out;
  };
  const std::vector<Shape> shapes = {{{4, 197, 768}, 2304},  // ViT-B/16's qkv projection
                                     {{4, 197, 768}, 3072},  // its MLP's first layer
                                     {{4, 197, 3072}, 768},  // and second
                                     {{3, 7, 64}, 48},       // rows not a multiple of 16
                                     {{1, 1, 16}, 16}};      // one row
  for (const Shape& s : shapes) {
    for (bool e4m3_gradients : {false, true}) {
      const Inputs in = Draw(s.x, s.out, 7);
      const Result exact = Exact(in.x, in.w, in.b, in.dy);
      const Result bf16 = RunLinear(in.x, in.w, in.b, in.dy, nullptr);
      auto state = c10::make_intrusive<Fp8LinearState>(Fp8Recipe{16, 0, e4m3_gradients});
      ASSERT_TRUE(Fp8LinearApplies(in.x, in.w, in.b));
      const Result fp8 = RunLinear(in.x, in.w, in.b, in.dy, state);
      ASSERT_EQ(state->fp8_calls(), 1);
      EXPECT_EQ(fp8.y.scalar_type(), torch::kBFloat16);
      EXPECT_EQ(fp8.dx.scalar_type(), torch::kBFloat16);
      EXPECT_EQ(fp8.dw.scalar_type(), torch::kFloat);
      EXPECT_EQ(fp8.db.scalar_type(), torch::kFloat);
      const double gradient_bound = e4m3_gradients ? kE4M3GradientBound : kE5M2GradientBound;
      const std::vector<
          std::tuple<const char*, torch::Tensor, torch::Tensor, torch::Tensor, double>>
          checks = {{"y", fp8.y, bf16.y, exact.y, kForwardBound},
                    {"dx", fp8.dx, bf16.dx, exact.dx, gradient_bound},
                    {"dW", fp8.dw, bf16.dw, exact.dw, gradient_bound},
                    {"db", fp8.db, bf16.db, exact.db, kBiasBound}};
      std::string dims;
      for (int64_t d : s.x) dims += std::to_string(d) + "x";
      dims += std::to_string(s.out);
      for (const auto& [name, value, plain, reference, allowed] : checks) {
        const double error = RelativeError(value, reference);
        std::printf(
            "[ fp8 ] [%s, gradients %s] %s: relative error %.4f (bf16 %.4f, allowed %.2f)\n",
            dims.c_str(), e4m3_gradients ? "e4m3" : "e5m2", name, error,
            RelativeError(plain, reference), allowed);
        EXPECT_LE(error, allowed) << dims << " " << name;
        EXPECT_TRUE(torch::isfinite(value).all().item<bool>()) << dims << " " << name;
      }
    }
  }
}

TEST(Fp8LinearGpuTest, ScalesFollowTheAmaxHistory) {
  RequireFp8Gpu();
  constexpr int kHistory = 4;
  auto state = c10::make_intrusive<Fp8LinearState>(Fp8Recipe{kHistory, 0, false});
  const Inputs in = Draw({2, 32, 64}, 48, 3);
  auto input_scale = [&] { return state->scale(Fp8Role::kInput).item<float>(); };
  auto newest = [&](Fp8Role role) { return state->amax_history(role)[0].item<float>(); };
  const float amax = in.x.abs().max().to(torch::kFloat).item<float>();

  // The first call primes each role from its own values.
  RunLinear(in.x, in.w, in.b, in.dy, state);
  EXPECT_NEAR(newest(Fp8Role::kInput), amax, 1e-6 * amax);
  EXPECT_NEAR(input_scale(), 448.f / amax, 1e-4 * 448.f / amax);
  const float w_amax = in.w.abs().max().item<float>();
  EXPECT_NEAR(state->scale(Fp8Role::kWeight).item<float>(), 448.f / w_amax, 1e-3 * 448.f / w_amax);
  const float dy_amax = in.dy.abs().max().to(torch::kFloat).item<float>();
  EXPECT_NEAR(state->scale(Fp8Role::kGradOutput).item<float>(), 57344.f / dy_amax,
              1e-3 * 57344.f / dy_amax);
  std::printf("[ fp8 ] primed: input scale %.4g (amax %.4g), weight %.4g, gradient %.4g\n",
              input_scale(), amax, state->scale(Fp8Role::kWeight).item<float>(),
              state->scale(Fp8Role::kGradOutput).item<float>());

  // A call with inputs 100 times larger: its amax enters the history, the scale drops.
  const torch::Tensor big = (in.x.to(torch::kFloat) * 100).to(torch::kBFloat16);
  const float big_amax = big.abs().max().to(torch::kFloat).item<float>();
  RunLinear(big, in.w, in.b, in.dy, state);
  EXPECT_NEAR(newest(Fp8Role::kInput), big_amax, 1e-6 * big_amax);
  EXPECT_NEAR(input_scale(), 448.f / big_amax, 1e-4 * 448.f / big_amax);
  // Back to the small inputs: the large amax stays for kHistory calls, then the scale
  // returns to the small inputs' own.
  std::vector<float> scales;
  for (int i = 0; i < kHistory; ++i) {
    RunLinear(in.x, in.w, in.b, in.dy, state);
    scales.push_back(input_scale());
  }
  std::printf("[ fp8 ] input scale after the large call: %.4g %.4g %.4g %.4g\n", scales[0],
              scales[1], scales[2], scales[3]);
  for (int i = 0; i + 1 < kHistory; ++i)
    EXPECT_NEAR(scales[i], 448.f / big_amax, 1e-4 * 448.f / big_amax) << "call " << i;
  EXPECT_NEAR(scales.back(), 448.f / amax, 1e-4 * 448.f / amax);

  // Scaled with the small inputs' scale, the output tracks fp32 again.
  const Result fp8 = RunLinear(in.x, in.w, in.b, in.dy, state);
  const Result exact = Exact(in.x, in.w, in.b, in.dy);
  EXPECT_LE(RelativeError(fp8.y, exact.y), kForwardBound);
}

TEST(Fp8LinearGpuTest, ShapesFp8CannotTakeRunTheBf16Linear) {
  RequireFp8Gpu();
  auto state = c10::make_intrusive<Fp8LinearState>();
  for (const auto& [x_shape, out] :
       std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{4, 100}, 10},    // a head
                                                             {{4, 60}, 48},     // in features
                                                             {{0, 64}, 48}}) {  // no rows
    const Inputs in = Draw(x_shape, out, 5);
    EXPECT_FALSE(Fp8LinearApplies(in.x, in.w, in.b));
    const Result bf16 = RunLinear(in.x, in.w, in.b, in.dy, nullptr);
    const Result fallback = RunLinear(in.x, in.w, in.b, in.dy, state);
    EXPECT_TRUE(torch::equal(fallback.y, bf16.y));
    EXPECT_TRUE(torch::equal(fallback.dw, bf16.dw));
  }
  EXPECT_EQ(state->fp8_calls(), 0);
}

TEST(Fp8LinearGpuTest, ForwardAndBackwardReplayAsACudaGraph) {
  RequireFp8Gpu();
  auto state = c10::make_intrusive<Fp8LinearState>();
  const Inputs in = Draw({4, 50, 256}, 512, 11);
  torch::Tensor x = in.x.clone().requires_grad_(true);
  torch::Tensor w = in.w.clone().requires_grad_(true);
  torch::Tensor b = in.b.clone().requires_grad_(true);
  auto step = [&] {
    torch::Tensor y;
    {
      Bf16Autocast autocast;
      y = Fp8Linear(x, w, b, state);
    }
    y.backward(in.dy);
    return y;
  };
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  torch::Tensor y;
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    for (int i = 0; i < 3; ++i) step();  // primed and warm, as the trainer's first steps
    x.mutable_grad().zero_();
    w.mutable_grad().zero_();
    b.mutable_grad().zero_();
    at::cuda::CUDAGraph graph;
    graph.capture_begin();
    y = step();
    graph.capture_end();
    const int64_t calls = state->fp8_calls();
    // A replay updates the history on the device: a doubled input shows up in it.
    x.detach().mul_(2);
    graph.replay();
    stream.synchronize();
    EXPECT_EQ(state->fp8_calls(), calls);  // the host did nothing
    const float doubled = (in.x.to(torch::kFloat) * 2).abs().max().item<float>();
    EXPECT_NEAR(state->amax_history(Fp8Role::kInput)[0].item<float>(), doubled, 1e-6 * doubled);
  }
  const Result exact = Exact(in.x.to(torch::kFloat) * 2, in.w, in.b, in.dy);
  std::printf("[ fp8 ] replayed: y %.4f, dW %.4f\n", RelativeError(y, exact.y),
              RelativeError(w.grad(), exact.dw));
  // The scale of the replay came from the undoubled inputs: values past their range
  // saturate, so only the weight's gradient (from the replay's dy and x) is compared.
  EXPECT_LE(RelativeError(w.grad(), exact.dw), kE5M2GradientBound);
}
#endif

}  // namespace
}  // namespace stoker::trainer
