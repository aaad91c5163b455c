// kPointwise calls against the ATen calls they replaced, on programs written call by call in
// the shapes the exported models have: ConvNeXt's layer scale over a permuted tensor with its
// stochastic-depth mask and in-place residual add, Swin's mask and residual add, a GELU whose
// input is read elsewhere too, casts, and one of every other op over odd and transposed
// shapes. On the CPU a region runs its composition: the values and gradients are the original
// calls' exactly. With STOKER_GPU_TEST the generated kernels run on the GPU in fp32 and bf16
// and are compared with the ATen calls on the same inputs (tolerances at Tolerance()), and
// each case prints the time of its forward and backward both ways.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainer/graph/graph_call.h"
#include "trainer/graph/pointwise_codegen.h"
#include "trainer/graph/pointwise_kernel.h"
#include "trainer/graph/pointwise_region.h"

namespace stoker::trainer {
namespace {

GraphArg Slot(int slot) { return GraphArg::OfSlot(slot); }
GraphArg Constant(c10::IValue value) { return GraphArg::OfConstant(std::move(value)); }

// A Python float where the schema takes a Tensor, as the archive reader converts it.
GraphArg WrappedNumber(double value) {
  at::Tensor wrapped = at::scalar_to_tensor(value);
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  return Constant(wrapped);
}

// A program written call by call: `inputs` slots first, then each call's one output.
class Program {
 public:
  explicit Program(int inputs) : slots_(inputs) {}

  int Call(const char* name, const char* overload, std::vector<GraphArg> args) {
    auto call = std::make_unique<GraphCall>();
    call->op = *c10::Dispatcher::singleton().findSchema({name, overload});
    call->args = std::move(args);
    call->outputs = {{slots_}};
    call->list_output = {false};
    call->where = std::string("node ") + name;
    calls_.push_back(std::move(call));
    return slots_++;
  }

  // The calls, and a copy of them (the rewrite moves calls into regions).
  std::vector<std::unique_ptr<GraphCall>> Calls() const {
    std::vector<std::unique_ptr<GraphCall>> copy;
    for (const auto& call : calls_) copy.push_back(std::make_unique<GraphCall>(*call));
    return copy;
  }
  int slots() const { return slots_; }

 private:
  int slots_;
  std::vector<std::unique_ptr<GraphCall>> calls_;
};

struct Case {
  std::string name;
  Program program;
  std::vector<int> outputs;                         // the slots read after the calls
  std::function<std::vector<at::Tensor>()> inputs;  // fp32, on the CPU
  std::vector<bool> differentiable;                 // per input
  int regions = 1;                                  // the rewrite's regions
};

// ConvNeXt's block end: x_nhwc.permute(0, 3, 1, 2) * gamma, times the stochastic-depth mask
// (bernoulli_ / keep, made here by clone), then added in place to the residual.
Case ConvNextLayerScale(int64_t n, int64_t c, int64_t hw) {
  Program p(4);  // 0 x [n, hw, hw, c], 1 gamma [c, 1, 1], 2 residual, 3 mask draws [n, 1, 1, 1]
  const int permuted =
      p.Call("aten::permute", "", {Slot(0), Constant(std::vector<int64_t>{0, 3, 1, 2})});
  const int scaled = p.Call("aten::mul", "Tensor", {Slot(1), Slot(permuted)});
  const int draws = p.Call("aten::clone", "", {Slot(3), Constant(c10::IValue())});
  const int mask = p.Call("aten::div_", "Tensor", {Slot(draws), WrappedNumber(0.9)});
  const int dropped = p.Call("aten::mul", "Tensor", {Slot(scaled), Slot(mask)});
  const int sum = p.Call("aten::add_", "Tensor", {Slot(dropped), Slot(2), Constant(1)});
  return {"convnext layer scale + mask + residual",
          std::move(p),
          {sum},
          [=] {
            return std::vector<at::Tensor>{at::randn({n, hw, hw, c}), at::rand({c, 1, 1}) + 0.1,
                                           at::randn({n, c, hw, hw}),
                                           at::bernoulli(at::full({n, 1, 1, 1}, 0.9))};
          },
          {true, true, true, false}};
}

// Swin's residual: x + drop_path(y), y [n, l, c] with a per-sample mask; the sum also cast to
// bf16 for the next matrix product.
Case SwinResidual(int64_t n, int64_t l, int64_t c) {
  Program p(3);  // 0 x, 1 y, 2 mask draws
  const int draws = p.Call("aten::clone", "", {Slot(2), Constant(c10::IValue())});
  const int mask = p.Call("aten::div_", "Tensor", {Slot(draws), WrappedNumber(0.95)});
  const int dropped = p.Call("aten::mul", "Tensor", {Slot(1), Slot(mask)});
  const int sum = p.Call("aten::add", "Tensor", {Slot(0), Slot(dropped), Constant(1)});
  const int cast = p.Call(
      "aten::_to_copy", "",
      {Slot(sum), Constant(static_cast<int64_t>(at::kBFloat16)), Constant(c10::IValue()),
       Constant(c10::IValue()), Constant(c10::IValue()), Constant(false), Constant(c10::IValue())});
  const int doubled = p.Call("aten::mul", "Tensor", {Slot(cast), WrappedNumber(2.0)});
  return {"swin mask + residual + cast",
          std::move(p),
          {sum, doubled},
          [=] {
            return std::vector<at::Tensor>{at::randn({n, l, c}), at::randn({n, l, c}),
                                           at::bernoulli(at::full({n, 1, 1}, 0.95))};
          },
          {true, true, false}};
}

// gelu(a * b + bias) with the sum read after the calls too, b transposed, bias broadcast.
Case GeluChain(int64_t rows, int64_t cols, const char* approximate) {
  Program p(3);  // 0 a [rows, cols], 1 b stored [cols, rows], 2 bias [cols]
  const int bt = p.Call("aten::transpose", "int", {Slot(1), Constant(0), Constant(1)});
  const int product = p.Call("aten::mul", "Tensor", {Slot(0), Slot(bt)});
  const int sum = p.Call("aten::add", "Tensor", {Slot(product), Slot(2), Constant(1)});
  const int gelu = p.Call("aten::gelu", "", {Slot(sum), Constant(std::string(approximate))});
  return {std::string("gelu(") + approximate + ") of a * b^T + bias",
          std::move(p),
          {sum, gelu},
          [=] {
            return std::vector<at::Tensor>{at::randn({rows, cols}), at::randn({cols, rows}),
                                           at::randn({cols})};
          },
          {true, true, true}};
}

// Every other op, over an odd shape with a broadcast operand.
Case EveryOp() {
  Program p(2);  // 0 x [3, 5, 7] (positive), 1 y [5, 1]
  const int s = p.Call("aten::sigmoid", "", {Slot(0)});
  const int e = p.Call("aten::exp", "", {Slot(s)});
  const int r = p.Call("aten::rsqrt", "", {Slot(e)});
  const int q = p.Call("aten::sqrt", "", {Slot(0)});
  const int sum = p.Call("aten::sub", "Tensor", {Slot(r), Slot(q), Constant(0.5)});
  const int quotient = p.Call("aten::div", "Tensor", {Slot(sum), Slot(1)});
  const int pw = p.Call("aten::pow", "Tensor_Scalar", {Slot(quotient), Constant(2.0)});
  const int si = p.Call("aten::silu", "", {Slot(pw)});
  const int t = p.Call("aten::tanh", "", {Slot(si)});
  const int neg = p.Call("aten::neg", "", {Slot(t)});
  const int cl = p.Call("aten::clamp", "", {Slot(neg), Constant(-0.5), Constant(c10::IValue())});
  const int re = p.Call("aten::relu", "", {Slot(cl)});
  const int mixed = p.Call("aten::add", "Tensor", {Slot(re), Slot(cl), Constant(1)});
  return {"sigmoid exp rsqrt sqrt sub div pow silu tanh neg clamp relu",
          std::move(p),
          {mixed},
          [] {
            return std::vector<at::Tensor>{at::rand({3, 5, 7}) + 0.2, at::rand({5, 1}) + 0.5};
          },
          {true, true}};
}

std::vector<Case> Cases(bool large) {
  std::vector<Case> cases;
  // Odd sizes everywhere; `large` adds ConvNeXt-T's first stage at batch 128 and Swin-V2-T's.
  cases.push_back(ConvNextLayerScale(3, 5, 7));
  cases.push_back(SwinResidual(3, 49, 9));
  cases.push_back(GeluChain(33, 17, "none"));
  cases.push_back(GeluChain(8, 129, "tanh"));
  cases.push_back(EveryOp());
  if (large) {
    cases.push_back(ConvNextLayerScale(128, 96, 56));
    cases.push_back(SwinResidual(128, 3136, 96));
    cases.push_back(GeluChain(128 * 3136, 96, "none"));
  }
  return cases;
}

struct Result {
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> grads;  // per input; undefined where not differentiable
};

// Runs `calls` on `inputs` (moved to `device` in `dtype`), then backward from fixed weights
// (drawn into `weights` on the first run, one per output, and reused after).
Result RunCalls(const std::vector<std::unique_ptr<GraphCall>>& calls, const Case& c,
                const std::vector<at::Tensor>& inputs, c10::Device device, at::ScalarType dtype,
                std::vector<at::Tensor>& weights) {
  std::vector<c10::IValue> values(c.program.slots() + 8);
  std::vector<at::Tensor> leaves;
  for (size_t j = 0; j < inputs.size(); ++j) {
    at::Tensor leaf = inputs[j].to(device, dtype).detach();
    if (c.differentiable[j]) leaf.requires_grad_();
    leaves.push_back(leaf);
    values[j] = leaf;
  }
  GraphFrame frame{&values, device, nullptr};
  for (const auto& call : calls) RunCall(*call, frame);
  Result result;
  at::Tensor loss;
  for (size_t o = 0; o < c.outputs.size(); ++o) {
    const at::Tensor out = values[c.outputs[o]].toTensor();
    result.outputs.push_back(out.detach());
    if (weights.size() <= o) {
      at::manual_seed(100 + o);
      weights.push_back(at::randn(out.sizes()).to(device));
    }
    const at::Tensor term = (out.to(at::kFloat) * weights[o]).sum();
    loss = loss.defined() ? loss + term : term;
  }
  std::vector<at::Tensor> wrt;
  for (size_t j = 0; j < leaves.size(); ++j) {
    if (c.differentiable[j]) wrt.push_back(leaves[j]);
  }
  const std::vector<at::Tensor> grads = torch::autograd::grad({loss}, wrt);
  for (size_t j = 0, k = 0; j < leaves.size(); ++j)
    result.grads.push_back(c.differentiable[j] ? grads[k++] : at::Tensor());
  return result;
}

#ifdef STOKER_GPU_TEST
// The worst error of `got` relative to the largest entry of `want`.
double Error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  EXPECT_EQ(g.sizes(), w.sizes());
  const double scale = std::max(w.abs().max().item<double>(), 1e-30);
  return (g - w).abs().max().item<double>() / scale;
}

// Forward outputs: fp32 kernels do the ATen kernels' float operations in the same order, up to
// the math library's last bit (erff, expf, division by a scalar that ATen does as a product by
// its reciprocal): 1e-5 of the largest entry. In bf16 every intermediate is rounded to bf16
// where ATen stores it, so a result differs only where float differences flip a rounding: one
// bf16 step, 2^(e-7) for a value in [2^e, 2^(e+1)), so up to 2^-7 of the largest entry. Gradients:
// the backward kernel computes in float where ATen's backward rounds every step to bf16, so bf16
// gradients may differ by a few bf16 steps (3e-2); fp32 ones by 1e-5.
double Tolerance(at::ScalarType dtype, bool gradient) {
  if (dtype == at::kFloat) return 1e-5;
  return gradient ? 3e-2 : 1.0 / 128;
}

double Milliseconds(const std::function<void()>& step) {
  for (int i = 0; i < 3; ++i) step();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  constexpr int kSteps = 20;
  for (int i = 0; i < kSteps; ++i) step();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         kSteps;
}

TEST(PointwiseKernelGpuTest, GeneratedKernelsMatchTheirAtenCalls) {
  ASSERT_TRUE(torch::cuda::is_available()) << "this test needs a GPU";
  const c10::Device gpu(c10::kCUDA, 0);
  for (const Case& c : Cases(/*large=*/true)) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(c.name + " in " + c10::toString(dtype));
      std::vector<std::unique_ptr<GraphCall>> plain = c.program.Calls();
      std::vector<std::unique_ptr<GraphCall>> fused = c.program.Calls();
      const PointwiseRegionCounts counts = FindPointwiseRegions(fused, c.outputs);
      ASSERT_EQ(counts.regions, c.regions);
      at::manual_seed(3);
      // On the device in `dtype` once, so that the timings below are the calls' own.
      std::vector<at::Tensor> inputs = c.inputs();
      for (at::Tensor& input : inputs) input = input.to(gpu, dtype);
      std::vector<at::Tensor> weights;
      const Result want = RunCalls(plain, c, inputs, gpu, dtype, weights);
      const int64_t launched = PointwiseKernelLaunches();
      const Result got = RunCalls(fused, c, inputs, gpu, dtype, weights);
      // Forward and backward of each region: the kernels ran, not the composition.
      ASSERT_EQ(PointwiseKernelLaunches() - launched, 2 * c.regions)
          << "the generated kernels did not run (see the log line above for why)";
      double worst_output = 0, worst_grad = 0;
      for (size_t o = 0; o < want.outputs.size(); ++o) {
        EXPECT_EQ(got.outputs[o].scalar_type(), want.outputs[o].scalar_type());
        // A region may end in a cast: an output is held to its own dtype's tolerance.
        EXPECT_LE(Error(got.outputs[o], want.outputs[o]),
                  Tolerance(want.outputs[o].scalar_type(), false))
            << "output " << o;
        worst_output = std::max(worst_output, Error(got.outputs[o], want.outputs[o]));
      }
      for (size_t j = 0; j < want.grads.size(); ++j) {
        if (!want.grads[j].defined()) continue;
        EXPECT_EQ(got.grads[j].scalar_type(), want.grads[j].scalar_type());
        worst_grad = std::max(worst_grad, Error(got.grads[j], want.grads[j]));
      }
      EXPECT_LE(worst_grad, Tolerance(dtype, true));
      const double aten_ms = Milliseconds([&] { RunCalls(plain, c, inputs, gpu, dtype, weights); });
      const double fused_ms =
          Milliseconds([&] { RunCalls(fused, c, inputs, gpu, dtype, weights); });
      std::printf(
          "pointwise %-58s %-9s shape %-18s outputs err %.2e grads err %.2e | forward+backward "
          "(with a weighted-sum loss) ATen %.3f ms, generated %.3f ms\n",
          c.name.c_str(), c10::toString(dtype), c10::str(inputs[0].sizes()).c_str(), worst_output,
          worst_grad, aten_ms, fused_ms);
    }
  }
}
#else
TEST(PointwiseKernelTest, RegionsOnTheCpuComputeWhatTheirCallsDid) {
  for (const Case& c : Cases(/*large=*/false)) {
    SCOPED_TRACE(c.name);
    std::vector<std::unique_ptr<GraphCall>> plain = c.program.Calls();
    std::vector<std::unique_ptr<GraphCall>> fused = c.program.Calls();
    const PointwiseRegionCounts counts = FindPointwiseRegions(fused, c.outputs);
    EXPECT_EQ(counts.regions, c.regions);
    ASSERT_LT(fused.size(), plain.size());
    for (const auto& call : fused) {
      if (call->pointwise != nullptr)
        std::printf("%s: %s\n", c.name.c_str(), call->pointwise->Describe().c_str());
    }
    at::manual_seed(3);
    const std::vector<at::Tensor> inputs = c.inputs();
    std::vector<at::Tensor> weights;
    const Result want = RunCalls(plain, c, inputs, c10::kCPU, at::kFloat, weights);
    const Result got = RunCalls(fused, c, inputs, c10::kCPU, at::kFloat, weights);
    for (size_t o = 0; o < want.outputs.size(); ++o)
      EXPECT_TRUE(at::equal(got.outputs[o], want.outputs[o]));
    for (size_t j = 0; j < want.grads.size(); ++j) {
      if (want.grads[j].defined()) {
        EXPECT_TRUE(at::equal(got.grads[j], want.grads[j]));
      }
    }
  }
}

// Each case's kernels compile with NVRTC for an H200 (sm_90, both PTX and the cubin the run
// loads), with inputs read linearly and through strides, in fp32 and bf16: no GPU needed.
TEST(PointwiseKernelTest, GeneratedSourcesCompileWithNvrtc) {
  for (const Case& c : Cases(/*large=*/false)) {
    std::vector<std::unique_ptr<GraphCall>> fused = c.program.Calls();
    FindPointwiseRegions(fused, c.outputs);
    for (const auto& call : fused) {
      if (call->pointwise == nullptr) continue;
      const PointwiseRegion& region = *call->pointwise;
      const size_t inputs = region.input_slots.size(), outputs = region.output_nodes.size();
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
        PointwiseSignature signature;
        signature.input_dtypes.assign(inputs, dtype);
        signature.input_zero_dim.assign(inputs, false);
        signature.input_linear.assign(inputs, true);
        signature.input_linear.back() = false;
        signature.rank = 3;
        signature.index32 = dtype == at::kHalf;
        signature.input_needs_grad = c.differentiable;
        signature.input_full_shape.assign(inputs, true);
        signature.input_full_shape.front() = false;
        signature.output_grad_given.assign(outputs, true);
        signature.output_grad_given.back() = outputs == 1;
        signature.output_grad_linear.assign(outputs, false);
        for (bool backward : {false, true}) {
          SCOPED_TRACE(c.name + (backward ? " backward in " : " forward in ") +
                       c10::toString(dtype));
          absl::StatusOr<std::string> source = backward ? PointwiseBackwardSource(region, signature)
                                                        : PointwiseForwardSource(region, signature);
          ASSERT_TRUE(source.ok()) << source.status();
          for (bool cubin : {false, true}) {
            absl::StatusOr<std::string> image = CompilePointwiseSource(*source, 9, 0, cubin);
            if (absl::IsUnavailable(image.status())) GTEST_SKIP() << image.status();
            ASSERT_TRUE(image.ok()) << image.status();
            EXPECT_FALSE(image->empty());
          }
        }
      }
    }
  }
}

// An in-place op on a tensor read after it, or on a parameter, stays as it is.
TEST(PointwiseKernelTest, InPlaceUpdatesOfTensorsReadLaterAreNotRegions) {
  Program p(2);
  const int product = p.Call("aten::mul", "Tensor", {Slot(0), Slot(1)});
  const int updated = p.Call("aten::add_", "Tensor", {Slot(1), Slot(product), Constant(1)});
  const int also = p.Call("aten::mul", "Tensor", {Slot(product), Slot(updated)});
  std::vector<std::unique_ptr<GraphCall>> calls = p.Calls();
  // add_ writes input 1 (a graph input): not owned. mul -> mul would be one region, but the
  // add_ between them reads the first product.
  const PointwiseRegionCounts counts = FindPointwiseRegions(calls, {also});
  EXPECT_EQ(counts.regions, 0);
  EXPECT_EQ(calls.size(), 3u);
}
#endif

}  // namespace
}  // namespace stoker::trainer
