// The fused blocks against their libtorch composition. On the CPU the entry points are the
// composition itself (same values, gradients and side effects); with STOKER_GPU_TEST the
// CUDA kernels are compared, over odd shapes and every dtype, with an fp64 reference and
// must be no less accurate than the composition in the same dtype (see Tolerance()).
#include "trainer/nn/fused_blocks.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "trainer/nn/random_batch_norm.h"

namespace stoker::trainer {
namespace {

namespace nn = torch::nn;

nn::BatchNorm2d CopyOf(const nn::BatchNorm2d& bn, torch::Device device, torch::Dtype dtype) {
  nn::BatchNorm2d copy(bn->options);
  copy->to(device, dtype);
  torch::NoGradGuard no_grad;
  copy->weight.copy_(bn->weight);
  copy->bias.copy_(bn->bias);
  copy->running_mean.copy_(bn->running_mean);
  copy->running_var.copy_(bn->running_var);
  copy->num_batches_tracked.copy_(bn->num_batches_tracked);
  copy->train(bn->is_training());
  return copy;
}

// Forward and backward of relu(bn(x) (+ residual)), or of bn(x) alone, given dy: output,
// input gradients, parameter gradients and the statistics after the step.
struct Result {
  torch::Tensor y, dx, dresidual, dweight, dbias, running_mean, running_var, batches;
};

// The result after backward: `x` and `residual` (may be undefined) are the leaves.
Result Collect(const nn::BatchNorm2dImpl& bn, const torch::Tensor& y, const torch::Tensor& x,
               const torch::Tensor& residual) {
  Result r;
  r.y = y;
  r.dx = x.grad();
  if (residual.defined()) r.dresidual = residual.grad();
  r.dweight = bn.weight.grad();
  r.dbias = bn.bias.grad();
  r.running_mean = bn.running_mean.detach().clone();
  r.running_var = bn.running_var.detach().clone();
  r.batches = bn.num_batches_tracked.detach().clone();
  return r;
}

// The three forms of the block: BatchNormReLU with and without a residual, BatchNorm.
enum class Form { kReLU, kAddReLU, kAlone };

Result RunBlock(nn::BatchNorm2d bn, const torch::Tensor& x, const torch::Tensor& residual,
                const torch::Tensor& dy, bool fused, Form form) {
  torch::Tensor xg = x.detach().clone().requires_grad_();
  torch::Tensor rg;
  if (residual.defined()) rg = residual.detach().clone().requires_grad_();
  const torch::Tensor y =
      form == Form::kAlone ? BatchNorm(*bn, xg, fused) : BatchNormReLU(*bn, xg, rg, fused);
  y.backward(dy);
  return Collect(*bn, y, xg, rg);
}

// The fp64 reference for a result whose ReLU kept the outputs `kept` (y > 0): output
// relu(bn(x) (+ residual)), gradients of bn(x) (+ residual) given dy * kept. An output within
// rounding of zero may fall on either side of the ReLU in two correct computations; taking
// the mask of the result under test compares everything else exactly. Form::kAlone: bn(x)
// and its gradients given dy (`kept` unused).
Result RunReference(nn::BatchNorm2d bn, const torch::Tensor& x, const torch::Tensor& residual,
                    const torch::Tensor& dy, const torch::Tensor& kept, Form form) {
  torch::Tensor xg = x.detach().to(torch::kDouble).requires_grad_();
  torch::Tensor rg;
  if (residual.defined()) rg = residual.detach().to(torch::kDouble).requires_grad_();
  torch::Tensor out = bn->forward(xg);
  if (rg.defined()) out = out + rg;
  if (form == Form::kAlone) {
    out.backward(dy.to(torch::kDouble));
    return Collect(*bn, out.detach(), xg, rg);
  }
  out.backward(dy.to(torch::kDouble) * kept.to(torch::kDouble));
  return Collect(*bn, torch::relu(out).detach(), xg, rg);
}

[[maybe_unused]] double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.to(torch::kCPU, torch::kDouble),
                      w = want.to(torch::kCPU, torch::kDouble);
  if (!torch::isfinite(g).all().item<bool>()) return INFINITY;
  return (g - w).norm().item<double>() / std::max(w.norm().item<double>(), 1e-30);
}

TEST(FusedBlocksCpuTest, BatchNormBlocksAreTheCompositionOnTheCpu) {
  torch::manual_seed(1);
  for (bool training : {true, false}) {
    for (Form form : {Form::kReLU, Form::kAddReLU, Form::kAlone}) {
      const bool with_residual = form == Form::kAddReLU;
      nn::BatchNorm2d bn = RandomBatchNorm(6);
      bn->train(training);
      const torch::Tensor x = torch::randn({3, 6, 5, 4});
      const torch::Tensor residual = with_residual ? torch::randn({3, 6, 5, 4}) : torch::Tensor();
      const torch::Tensor dy = torch::randn({3, 6, 5, 4});
      EXPECT_FALSE(FusedBatchNormApplies(*bn, x, residual));

      const Result fused =
          RunBlock(CopyOf(bn, torch::kCPU, torch::kFloat), x, residual, dy, true, form);
      // The composition written out: bn.forward, += residual, relu_.
      nn::BatchNorm2d plain = CopyOf(bn, torch::kCPU, torch::kFloat);
      torch::Tensor xg = x.clone().requires_grad_();
      torch::Tensor rg = with_residual ? residual.clone().requires_grad_() : torch::Tensor();
      torch::Tensor y = plain->forward(xg);
      if (with_residual) y = y + rg;
      if (form != Form::kAlone) y = torch::relu(y);
      y.backward(dy);

      EXPECT_TRUE(torch::equal(fused.y, y));
      EXPECT_TRUE(torch::equal(fused.dx, xg.grad()));
      if (with_residual) {
        EXPECT_TRUE(torch::equal(fused.dresidual, rg.grad()));
      }
      EXPECT_TRUE(torch::equal(fused.dweight, plain->weight.grad()));
      EXPECT_TRUE(torch::equal(fused.dbias, plain->bias.grad()));
      EXPECT_TRUE(torch::equal(fused.running_mean, plain->running_mean));
      EXPECT_TRUE(torch::equal(fused.running_var, plain->running_var));
      EXPECT_EQ(fused.batches.item<int64_t>(), training ? 1 : 0);
    }
  }
}

TEST(FusedBlocksCpuTest, MaxPoolIsTheCompositionOnTheCpu) {
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({2, 5, 11, 8}).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_FALSE(FusedMaxPoolApplies(x, 3));
  EXPECT_TRUE(
      torch::equal(MaxPool2d(x, 3, 2, 1, true), torch::max_pool2d(x, {3, 3}, {2, 2}, {1, 1})));
}

#ifdef STOKER_GPU_TEST

// The relative L2 error a fused result may have against the fp64 reference: no more than
// twice the composition's in the same dtype, and never more than what rounding of the
// dtype explains. bf16 keeps 8 significant bits (a relative rounding error up to 2^-9 per
// value, about 1e-3 in L2 over many values; sums of rounded terms and the ReLU mask flipping
// for outputs that round across zero add to it), fp16 keeps 11; fp32 results differ from
// fp64 by accumulation order only.
double Tolerance(torch::Dtype dtype, double composed_error) {
  const double rounding = dtype == torch::kBFloat16 ? 1e-2 : dtype == torch::kHalf ? 2e-3 : 1e-5;
  return std::max(2 * composed_error, rounding);
}

struct Shape {
  int64_t n, c, h, w;
};

std::string Name(const Shape& s, torch::Dtype dtype, bool training, Form form) {
  return std::string(c10::toString(dtype)) + " [" + std::to_string(s.n) + "," +
         std::to_string(s.c) + "," + std::to_string(s.h) + "," + std::to_string(s.w) + "] " +
         (training ? "train" : "eval") +
         (form == Form::kAddReLU ? " +residual"
          : form == Form::kAlone ? " alone"
                                 : "");
}

class FusedBlocksGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(torch::cuda::is_available()) << "the gpu tests need a CUDA device";
  }
};

TEST_F(FusedBlocksGpuTest, BatchNormBlocksMatchTheCompositionAcrossShapesAndDtypes) {
  torch::manual_seed(3);
  const torch::Device gpu(torch::kCUDA);
  // Channels not a multiple of 8 (the scalar path), batch 1, one pixel, large spatial sizes.
  const std::vector<Shape> shapes = {{2, 3, 5, 7},     {1, 64, 56, 56}, {4, 100, 9, 9},
                                     {8, 256, 14, 14}, {2, 2048, 7, 7}, {2, 64, 112, 112},
                                     {5, 24, 1, 1},    {3, 16, 2, 1}};
  int cases = 0;
  for (const Shape& s : shapes) {
    for (torch::Dtype dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
      for (bool training : {true, false}) {
        for (Form form : {Form::kReLU, Form::kAddReLU, Form::kAlone}) {
          const bool with_residual = form == Form::kAddReLU;
          const std::string name = Name(s, dtype, training, form);
          nn::BatchNorm2d master = RandomBatchNorm(s.c);
          master->train(training);
          auto make = [&](double mean, double stddev) {
            return (torch::randn({s.n, s.c, s.h, s.w}) * stddev + mean)
                .to(gpu, dtype)
                .contiguous(at::MemoryFormat::ChannelsLast);
          };
          // A mean far from zero relative to the spread tests the variance's stability.
          const torch::Tensor x = make(3.0, 0.5);
          const torch::Tensor residual = with_residual ? make(0.0, 1.0) : torch::Tensor();
          const torch::Tensor dy = make(0.0, 1.0);

          nn::BatchNorm2d fused_bn = CopyOf(master, gpu, torch::kFloat);
          ASSERT_TRUE(FusedBatchNormApplies(*fused_bn, x, residual)) << name;
          const Result fused = RunBlock(fused_bn, x, residual, dy, true, form);
          const Result composed =
              RunBlock(CopyOf(master, gpu, torch::kFloat), x, residual, dy, false, form);
          const torch::Tensor fused_kept = fused.y > 0, composed_kept = composed.y > 0;
          const Result reference =
              RunReference(CopyOf(master, gpu, torch::kDouble), x, residual, dy, fused_kept, form);
          const Result composed_reference = RunReference(CopyOf(master, gpu, torch::kDouble), x,
                                                         residual, dy, composed_kept, form);
          // Only outputs within rounding of zero may land on the other side of the ReLU.
          if (form != Form::kAlone) {
            const int64_t flipped = (fused_kept != (reference.y > 0)).sum().item<int64_t>();
            EXPECT_LE(flipped, std::max<int64_t>(2, x.numel() / 100000)) << name;
          }
          ASSERT_EQ(fused.y.scalar_type(), dtype) << name;
          EXPECT_TRUE(fused.y.is_contiguous(at::MemoryFormat::ChannelsLast)) << name;
          // Each result against the reference that shares its ReLU mask.
          auto expect_close = [&](const char* what, const torch::Tensor& got,
                                  const torch::Tensor& comp, const torch::Tensor& ref,
                                  const torch::Tensor& comp_ref, torch::Dtype error_dtype) {
            const double composed_error = RelativeError(comp, comp_ref);
            const double error = RelativeError(got, ref);
            EXPECT_LE(error, Tolerance(error_dtype, composed_error))
                << name << " " << what << ": fused error " << error << ", composition's "
                << composed_error;
          };
          expect_close("output", fused.y, composed.y, reference.y, composed_reference.y, dtype);
          expect_close("input gradient", fused.dx, composed.dx, reference.dx, composed_reference.dx,
                       dtype);
          if (with_residual) {
            expect_close("residual gradient", fused.dresidual, composed.dresidual,
                         reference.dresidual, composed_reference.dresidual, dtype);
          }
          // Parameter gradients and statistics are fp32 sums over the batch.
          expect_close("weight gradient", fused.dweight, composed.dweight, reference.dweight,
                       composed_reference.dweight, dtype);
          expect_close("bias gradient", fused.dbias, composed.dbias, reference.dbias,
                       composed_reference.dbias, dtype);
          expect_close("running mean", fused.running_mean, composed.running_mean,
                       reference.running_mean, composed_reference.running_mean, torch::kFloat);
          expect_close("running var", fused.running_var, composed.running_var,
                       reference.running_var, composed_reference.running_var, torch::kFloat);
          EXPECT_EQ(fused.batches.item<int64_t>(), composed.batches.item<int64_t>()) << name;
          ++cases;
        }
      }
    }
  }
  std::printf("[ fused ] batch norm (+ ReLU, + add + ReLU): %d cases compared on %s\n", cases,
              torch::cuda::is_available() ? "the GPU" : "?");
}

TEST_F(FusedBlocksGpuTest, MaxPoolMatchesTorchMaxPool) {
  torch::manual_seed(4);
  const torch::Device gpu(torch::kCUDA);
  struct Case {
    Shape s;
    int kernel, stride, padding;
  };
  const std::vector<Case> cases = {{{2, 64, 112, 112}, 3, 2, 1}, {{1, 3, 7, 9}, 3, 2, 1},
                                   {{3, 100, 15, 15}, 3, 2, 1},  {{2, 16, 8, 8}, 2, 2, 0},
                                   {{1, 8, 1, 1}, 3, 2, 1},      {{4, 40, 10, 6}, 3, 1, 1}};
  int compared = 0;
  for (const Case& c : cases) {
    for (torch::Dtype dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
      const std::string name =
          Name(c.s, dtype, true, Form::kReLU) + " k" + std::to_string(c.kernel);
      const torch::Tensor x = torch::randn({c.s.n, c.s.c, c.s.h, c.s.w})
                                  .to(gpu, dtype)
                                  .contiguous(at::MemoryFormat::ChannelsLast);
      ASSERT_TRUE(FusedMaxPoolApplies(x, c.kernel)) << name;
      torch::Tensor xf = x.clone().requires_grad_(), xc = x.clone().requires_grad_();
      torch::Tensor yf = MaxPool2d(xf, c.kernel, c.stride, c.padding, true);
      torch::Tensor yc =
          torch::max_pool2d(xc, {c.kernel, c.kernel}, {c.stride, c.stride}, {c.padding, c.padding});
      ASSERT_EQ(yf.sizes(), yc.sizes()) << name;
      EXPECT_TRUE(torch::equal(yf, yc)) << name << ": the maxima differ";
      const torch::Tensor dy = torch::randn_like(yc);
      yf.backward(dy);
      yc.backward(dy);
      // The same elements receive gradient; sums of up to four terms may round differently.
      EXPECT_TRUE(torch::equal(xf.grad() != 0, xc.grad() != 0)) << name;
      EXPECT_LE(RelativeError(xf.grad(), xc.grad().to(torch::kDouble)), Tolerance(dtype, 0))
          << name;
      ++compared;
    }
  }
  std::printf("[ fused ] max pool: %d cases compared\n", compared);
}

#endif  // STOKER_GPU_TEST

}  // namespace
}  // namespace stoker::trainer
