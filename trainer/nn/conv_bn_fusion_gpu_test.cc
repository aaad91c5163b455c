// Conv + batch-norm fusion (conv_bn_fusion.h) on the GPU against the unfused composition
// (conv2d, batch_norm in training mode, ReLU, residual add, under bf16 autocast in
// channels_last), on ResNet-50's bottleneck blocks and odd shapes, through cuDNN's fused
// graphs and through the unfused fallback; that cuDNN has engines for ResNet-50's shapes;
// and a micro-benchmark per ResNet-50 block shape.
//
// Tolerance: both sides round to bf16 at every activation, in different orders (the fused
// convolution normalises its operand in fp32 registers, the composition writes it out in
// bf16), so neither is the exact answer. Each is measured against an fp32 composition on
// the same weights and inputs, as ||a - ref|| / ||ref|| over the whole tensor; the fused
// result must be within twice the bf16 composition's own error plus 2e-3 (the error of a
// bf16 rounding is 2^-9 ~ 2e-3 relative). Running statistics have no bf16 rounding of their
// own: within 2x + 1e-3 likewise.
#include "trainer/nn/conv_bn_fusion.h"

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "trainer/nn/conv_bn_graphs.h"
#include "trainer/nn/fused_blocks.h"

namespace stoker::trainer {
namespace {

namespace nn = torch::nn;

// One bottleneck block's layers (torchvision's Bottleneck, stride on the 3x3 convolution),
// with a downsample where the shapes differ.
struct Block {
  int64_t in_channels, planes, stride;
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, down_conv{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr}, down_bn{nullptr};

  std::vector<nn::Conv2d> convs() const {
    std::vector<nn::Conv2d> v{conv1, conv2, conv3};
    if (down_conv) v.push_back(down_conv);
    return v;
  }
  std::vector<nn::BatchNorm2d> bns() const {
    std::vector<nn::BatchNorm2d> v{bn1, bn2, bn3};
    if (down_bn) v.push_back(down_bn);
    return v;
  }
};

nn::BatchNorm2d RandomBatchNorm(int64_t channels) {
  nn::BatchNorm2d bn(channels);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.normal_(0, 0.1);
  bn->running_var.uniform_(0.5, 1.5);
  return bn;
}

nn::Conv2d RandomConv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  nn::Conv2d conv(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
  torch::NoGradGuard no_grad;
  nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
  return conv;
}

Block MakeBlock(int64_t in_channels, int64_t planes, int64_t stride) {
  Block b{in_channels, planes, stride};
  b.conv1 = RandomConv(in_channels, planes, 1, 1);
  b.bn1 = RandomBatchNorm(planes);
  b.conv2 = RandomConv(planes, planes, 3, stride);
  b.bn2 = RandomBatchNorm(planes);
  b.conv3 = RandomConv(planes, planes * 4, 1, 1);
  b.bn3 = RandomBatchNorm(planes * 4);
  if (stride != 1 || in_channels != planes * 4) {
    b.down_conv = RandomConv(in_channels, planes * 4, 1, stride);
    b.down_bn = RandomBatchNorm(planes * 4);
  }
  for (auto& c : b.convs()) {
    c->to(torch::kCUDA, torch::kFloat);
    c->weight.set_data(c->weight.contiguous(at::MemoryFormat::ChannelsLast));
  }
  for (auto& n : b.bns()) n->to(torch::kCUDA, torch::kFloat);
  return b;
}

// A copy with the same parameters and buffers, gradients cleared.
Block CopyOf(const Block& b) {
  Block c = MakeBlock(b.in_channels, b.planes, b.stride);
  torch::NoGradGuard no_grad;
  auto from_c = b.convs(), to_c = c.convs();
  for (size_t i = 0; i < from_c.size(); ++i) to_c[i]->weight.copy_(from_c[i]->weight);
  auto from_n = b.bns(), to_n = c.bns();
  for (size_t i = 0; i < from_n.size(); ++i) {
    to_n[i]->weight.copy_(from_n[i]->weight);
    to_n[i]->bias.copy_(from_n[i]->bias);
    to_n[i]->running_mean.copy_(from_n[i]->running_mean);
    to_n[i]->running_var.copy_(from_n[i]->running_var);
  }
  return c;
}

// The composition: torch::nn modules and ops, as an unfused eager model runs them.
torch::Tensor ComposedForward(Block& b, const torch::Tensor& x) {
  torch::Tensor out = b.bn1->forward(b.conv1->forward(x)).relu();
  out = b.bn2->forward(b.conv2->forward(out)).relu();
  out = b.bn3->forward(b.conv3->forward(out));
  torch::Tensor shortcut = b.down_conv ? b.down_bn->forward(b.down_conv->forward(x)) : x;
  return (out + shortcut).relu();
}

// Stoker's unfused path of today: ATen convolutions and the fused batch-norm blocks.
torch::Tensor FusedBlocksForward(Block& b, const torch::Tensor& x) {
  torch::Tensor out = BatchNormReLU(*b.bn1, b.conv1->forward(x), {}, true);
  out = BatchNormReLU(*b.bn2, b.conv2->forward(out), {}, true);
  torch::Tensor shortcut = b.down_conv ? BatchNorm(*b.down_bn, b.down_conv->forward(x), true) : x;
  return BatchNormReLU(*b.bn3, b.conv3->forward(out), shortcut, true);
}

// The fused chain of conv_bn_fusion.h.
torch::Tensor ConvBnForward(Block& b, const torch::Tensor& x) {
  PendingBatchNorm a = ConvWithBatchStatistics(*b.conv1, *b.bn1, x);
  a = NormReluConvWithBatchStatistics(a, *b.conv2, *b.bn2);
  a = NormReluConvWithBatchStatistics(a, *b.conv3, *b.bn3);
  torch::Tensor shortcut = x;
  if (b.down_conv) {
    shortcut = FinishBatchNorm(ConvWithBatchStatistics(*b.down_conv, *b.down_bn, x), {},
                               /*relu=*/false);
  }
  return FinishBatchNorm(a, shortcut, /*relu=*/true);
}

using Forward = std::function<torch::Tensor(Block&, const torch::Tensor&)>;

// Everything a training step of the block produces, in fp32.
struct Result {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
};

// Forward (under bf16 autocast unless `fp32`) and backward with output gradient dy.
Result RunStep(Block& b, const Forward& forward, const torch::Tensor& x_in, const torch::Tensor& dy,
               bool fp32) {
  torch::Tensor x = (fp32 ? x_in.to(torch::kFloat) : x_in.to(torch::kBFloat16))
                        .contiguous(at::MemoryFormat::ChannelsLast)
                        .detach()
                        .requires_grad_(true);
  at::autocast::set_autocast_enabled(at::kCUDA, !fp32);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  torch::Tensor y = forward(b, x);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  (y.to(torch::kFloat) * dy).sum().backward();
  Result r;
  r.tensors.push_back({"output", y.detach().to(torch::kFloat)});
  r.tensors.push_back({"input grad", x.grad().to(torch::kFloat)});
  const char* conv_names[] = {"conv1", "conv2", "conv3", "downsample conv"};
  const char* bn_names[] = {"bn1", "bn2", "bn3", "downsample bn"};
  auto convs = b.convs();
  for (size_t i = 0; i < convs.size(); ++i) {
    r.tensors.push_back({std::string(conv_names[i]) + " weight grad", convs[i]->weight.grad()});
  }
  auto bns = b.bns();
  for (size_t i = 0; i < bns.size(); ++i) {
    const std::string n = bn_names[i];
    r.tensors.push_back({n + " weight grad", bns[i]->weight.grad()});
    r.tensors.push_back({n + " bias grad", bns[i]->bias.grad()});
    r.tensors.push_back({n + " running_mean", bns[i]->running_mean.clone()});
    r.tensors.push_back({n + " running_var", bns[i]->running_var.clone()});
    r.tensors.push_back(
        {n + " num_batches_tracked", bns[i]->num_batches_tracked.to(torch::kFloat).reshape({1})});
  }
  return r;
}

double RelativeError(const torch::Tensor& a, const torch::Tensor& ref) {
  const double norm = ref.to(torch::kDouble).norm().item<double>();
  const double diff = (a.to(torch::kDouble) - ref.to(torch::kDouble)).norm().item<double>();
  return norm == 0 ? diff : diff / norm;
}

struct Case {
  int64_t batch, in_channels, planes, height, stride;
  std::string Name() const {
    return "n" + std::to_string(batch) + " c" + std::to_string(in_channels) + " planes" +
           std::to_string(planes) + " h" + std::to_string(height) + " s" + std::to_string(stride);
  }
};

// ResNet-50's bottleneck blocks (the first of each layer with its downsample), at a batch
// that keeps the test short; the engines are checked at batch 256 below.
std::vector<Case> ResNet50Blocks(int64_t batch) {
  return {{batch, 64, 64, 56, 1},    {batch, 256, 64, 56, 1},  {batch, 256, 128, 56, 2},
          {batch, 512, 128, 28, 1},  {batch, 512, 256, 28, 2}, {batch, 1024, 256, 14, 1},
          {batch, 1024, 512, 14, 2}, {batch, 2048, 512, 7, 1}};
}

class ConvBnFusionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(torch::cuda::is_available()) << "the gpu tests need a CUDA device";
    at::globalContext().setBenchmarkCuDNN(true);
  }
  void TearDown() override { SetConvBnGraphsEnabledForTesting(true); }

  // The fused block against the composition, both measured against fp32.
  void ExpectMatchesComposition(const Case& c, bool graphs) {
    SCOPED_TRACE(c.Name() + (graphs ? " (cuDNN graphs)" : " (unfused fallback)"));
    SetConvBnGraphsEnabledForTesting(graphs);
    torch::manual_seed(7);
    Block base = MakeBlock(c.in_channels, c.planes, c.stride);
    const torch::Tensor x =
        torch::randn({c.batch, c.in_channels, c.height, c.height}, torch::kCUDA).relu_();
    const int64_t out_h = (c.height - 1) / c.stride + 1;
    const torch::Tensor dy = torch::randn({c.batch, c.planes * 4, out_h, out_h}, torch::kCUDA);
    Block ref_block = CopyOf(base), bf16_block = CopyOf(base), fused_block = CopyOf(base);
    const Result ref = RunStep(ref_block, ComposedForward, x, dy, /*fp32=*/true);
    const Result bf16 = RunStep(bf16_block, ComposedForward, x, dy, /*fp32=*/false);
    ASSERT_TRUE(
        ConvBnFusionApplies(*fused_block.conv1, *fused_block.bn1,
                            x.to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast)));
    const Result fused = RunStep(fused_block, ConvBnForward, x, dy, /*fp32=*/false);
    ASSERT_EQ(fused.tensors.size(), ref.tensors.size());
    for (size_t i = 0; i < ref.tensors.size(); ++i) {
      const std::string& name = ref.tensors[i].first;
      const double composed_error = RelativeError(bf16.tensors[i].second, ref.tensors[i].second);
      const double fused_error = RelativeError(fused.tensors[i].second, ref.tensors[i].second);
      const bool statistic = name.find("running") != std::string::npos;
      const double bound = 2 * composed_error + (statistic ? 1e-3 : 2e-3);
      EXPECT_LE(fused_error, bound)
          << name << ": fused error " << fused_error << ", bf16 composition's " << composed_error;
      std::printf("%-28s %-24s fused %.2e  composition %.2e\n", c.Name().c_str(), name.c_str(),
                  fused_error, composed_error);
    }
  }
};

TEST_F(ConvBnFusionGpuTest, CudnnHasEnginesForResNet50Shapes) {
  // The convolutions of ResNet-50's blocks at batch 256, with the graphs the fused chain
  // runs for each: the first 1x1 and the downsample take the block's input as it is; the
  // 3x3 and the last 1x1 normalise theirs in the prologue.
  int missing = 0;
  for (const Case& c : ResNet50Blocks(256)) {
    struct Conv {
      int64_t in, out, kernel, stride, height;
      bool prologue;
    };
    std::vector<Conv> convs = {{c.in_channels, c.planes, 1, 1, c.height, false},
                               {c.planes, c.planes, 3, c.stride, c.height, true},
                               {c.planes, c.planes * 4, 1, 1, (c.height - 1) / c.stride + 1, true}};
    if (c.stride != 1 || c.in_channels != c.planes * 4) {
      convs.push_back({c.in_channels, c.planes * 4, 1, c.stride, c.height, false});
    }
    for (const Conv& v : convs) {
      ConvShape shape;
      shape.batch = 256;
      shape.in_channels = v.in;
      shape.height = shape.width = v.height;
      shape.out_channels = v.out;
      shape.kernel = v.kernel;
      shape.stride = v.stride;
      shape.padding = v.kernel / 2;
      shape.type = ElementType::kBFloat16;
      std::vector<ConvBnGraph> kinds = {ConvBnGraph::kForwardStats};
      if (v.prologue) {
        kinds = {ConvBnGraph::kNormReluForwardStats, ConvBnGraph::kDgradReluNormWeight,
                 ConvBnGraph::kNormReluWgrad};
      }
      for (ConvBnGraph kind : kinds) {
        absl::StatusOr<ConvBnPlanInfo> plan = PrepareConvBnGraph(kind, shape);
        if (plan.ok()) {
          std::printf("engine: %-24s %-40s workspace %lld B, scale %s\n", ConvBnGraphName(kind),
                      shape.ToString().c_str(), static_cast<long long>(plan->workspace_bytes),
                      plan->scale_type == ElementType::kFloat32 ? "fp32" : "bf16");
        } else {
          ++missing;
          ADD_FAILURE() << "no engine: " << plan.status().message();
        }
      }
    }
  }
  EXPECT_EQ(missing, 0);
}

TEST_F(ConvBnFusionGpuTest, ResNet50BlocksMatchTheComposition) {
  for (const Case& c : ResNet50Blocks(32)) ExpectMatchesComposition(c, /*graphs=*/true);
}

TEST_F(ConvBnFusionGpuTest, ResNet50BlocksMatchTheCompositionWithoutCudnnGraphs) {
  for (const Case& c : ResNet50Blocks(8)) ExpectMatchesComposition(c, /*graphs=*/false);
}

TEST_F(ConvBnFusionGpuTest, OddShapesMatchTheComposition) {
  // Channel counts that are no multiple of 8, odd sizes and batches: cuDNN may have no
  // engine (the fallback runs, logged once); the results match either way.
  for (const Case& c : std::vector<Case>{
           {3, 24, 12, 9, 2}, {5, 40, 24, 11, 1}, {2, 16, 8, 7, 1}, {4, 64, 32, 15, 2}}) {
    ExpectMatchesComposition(c, /*graphs=*/true);
  }
}

TEST_F(ConvBnFusionGpuTest, TheSameStepTwiceGivesTheSameResult) {
  // Plans come from the cache the second time; the result must not change beyond the
  // order of atomic additions in the kernels' reductions (a bf16 ulp here and there, far
  // below 1e-3 over a tensor; a wrong plan would be off by order 1).
  SetConvBnGraphsEnabledForTesting(true);
  torch::manual_seed(3);
  Block base = MakeBlock(256, 64, 1);
  const torch::Tensor x = torch::randn({16, 256, 14, 14}, torch::kCUDA).relu_();
  const torch::Tensor dy = torch::randn({16, 256, 14, 14}, torch::kCUDA);
  Block first = CopyOf(base), second = CopyOf(base);
  const Result a = RunStep(first, ConvBnForward, x, dy, false);
  const Result b = RunStep(second, ConvBnForward, x, dy, false);
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_LE(RelativeError(b.tensors[i].second, a.tensors[i].second), 1e-3) << a.tensors[i].first;
  }
}

// Milliseconds per call of f, averaged after warm-up.
double TimeMs(const std::function<void()>& f, int iterations = 20) {
  for (int i = 0; i < 5; ++i) f();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         iterations;
}

TEST_F(ConvBnFusionGpuTest, BenchmarkResNet50BlocksAtBatch256) {
  SetConvBnGraphsEnabledForTesting(true);
  std::printf("%-34s %10s %10s %10s | %10s %10s %10s  (ms)\n", "block (bf16, channels_last)",
              "fwd comp", "fwd today", "fwd fused", "bwd comp", "bwd today", "bwd fused");
  double totals[6] = {0, 0, 0, 0, 0, 0};
  for (const Case& c : ResNet50Blocks(256)) {
    torch::manual_seed(1);
    Block block = MakeBlock(c.in_channels, c.planes, c.stride);
    const torch::Tensor x = torch::randn({c.batch, c.in_channels, c.height, c.height}, torch::kCUDA)
                                .relu_()
                                .to(torch::kBFloat16)
                                .contiguous(at::MemoryFormat::ChannelsLast);
    const int64_t out_h = (c.height - 1) / c.stride + 1;
    const torch::Tensor dy = torch::randn({c.batch, c.planes * 4, out_h, out_h}, torch::kCUDA)
                                 .to(torch::kBFloat16)
                                 .contiguous(at::MemoryFormat::ChannelsLast);
    double ms[6] = {0, 0, 0, 0, 0, 0};
    const Forward forwards[3] = {ComposedForward, FusedBlocksForward, ConvBnForward};
    for (int f = 0; f < 3; ++f) {
      at::autocast::set_autocast_enabled(at::kCUDA, true);
      at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
      const torch::Tensor leaf = x.detach().requires_grad_(true);
      // Forward with autograd recording, then backward: minus forward alone (with grad).
      const double with_grad_ms = TimeMs([&] { forwards[f](block, leaf); });
      const double step_ms = TimeMs([&] {
        torch::Tensor y = forwards[f](block, leaf);
        y.backward(dy);
      });
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::clear_cache();
      ms[f] = with_grad_ms;
      ms[3 + f] = step_ms - with_grad_ms;
    }
    for (int i = 0; i < 6; ++i) totals[i] += ms[i];
    std::printf("%-34s %10.3f %10.3f %10.3f | %10.3f %10.3f %10.3f\n", c.Name().c_str(), ms[0],
                ms[1], ms[2], ms[3], ms[4], ms[5]);
  }
  std::printf("%-34s %10.3f %10.3f %10.3f | %10.3f %10.3f %10.3f\n", "sum (one block per shape)",
              totals[0], totals[1], totals[2], totals[3], totals[4], totals[5]);
}

}  // namespace
}  // namespace stoker::trainer
