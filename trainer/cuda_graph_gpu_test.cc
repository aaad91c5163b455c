// CUDA graphs on the GPU: a captured graph replays with its inputs' current contents and its
// generators' current seeds; a capture that fails leaves nothing capturing; and a training
// step captured and replayed (Note [Capturing the step]) gives the uncaptured step's bits:
// losses, parameters, skipped steps, with batch norm, autocast, loss scaling with
// overflows, clipping, accumulation, SGD and AdamW, and a learning rate that changes every
// step.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "trainer/comm/fake_communicator.h"
#include "trainer/cuda_graph.h"
#include "trainer/train_step.h"

namespace stoker::trainer {
namespace {

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(UseCapturableStream().ok());
  }
};

TEST_F(CudaGraphTest, ReplaysReadTheInputsCurrentContentsAndDrawFromTheCurrentSeed) {
  const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA);
  at::Generator generator = at::cuda::detail::createCUDAGenerator(0);
  generator.set_current_seed(1);
  const at::Tensor input = at::arange(8, cuda.dtype(at::kFloat));
  const at::Tensor doubled = at::empty_like(input);
  const at::Tensor mask = at::empty({1024}, cuda.dtype(at::kFloat));
  // One eager draw first, as the step's uncaptured warm-up makes: the generator's state is
  // then on the device.
  at::bernoulli(mask, 0.5, generator);
  auto pool = GraphPool::Create();
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto graph = CudaGraph::Capture(*pool, {generator}, [&] {
    doubled.copy_(input * 2);
    mask.copy_(at::bernoulli(at::empty({1024}, cuda.dtype(at::kFloat)), 0.5, generator));
    return absl::OkStatus();
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (uint64_t seed : {11u, 12u, 11u}) {
    input.fill_(static_cast<float>(seed));
    generator.set_current_seed(seed);
    ASSERT_TRUE((*graph)->Replay().ok());
    EXPECT_TRUE(at::equal(doubled, at::full({8}, 2.0f * seed, cuda.dtype(at::kFloat))));
    generator.set_current_seed(seed);
    const at::Tensor eager =
        at::bernoulli(at::empty({1024}, cuda.dtype(at::kFloat)), 0.5, generator);
    EXPECT_TRUE(at::equal(mask, eager)) << "seed " << seed;
  }
}

TEST_F(CudaGraphTest, AFailedCaptureSaysWhyAndLeavesNothingCapturing) {
  const at::Tensor x = at::ones({4}, at::TensorOptions().device(at::kCUDA));
  auto pool = GraphPool::Create();
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto graph = CudaGraph::Capture(*pool, {}, [&] {
    const float host = (x * 3).sum().item<float>();  // a host read: not capturable
    (void)host;
    return absl::OkStatus();
  });
  ASSERT_FALSE(graph.ok());
  std::printf("[ graphs ] a failed capture: %s\n", std::string(graph.status().message()).c_str());
  EXPECT_TRUE(absl::StartsWith(graph.status().message(), "capturing a CUDA graph: "))
      << graph.status();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream().stream(), &capturing),
            cudaSuccess);
  EXPECT_EQ(capturing, cudaStreamCaptureStatusNone);
  EXPECT_EQ((x * 3).sum().item<float>(), 12.0f);
  const at::Tensor y = at::empty_like(x);
  auto again = CudaGraph::Capture(*pool, {}, [&] {
    y.copy_(x + 1);
    return absl::OkStatus();
  });
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Replay().ok());
  EXPECT_TRUE(at::equal(y, at::full({4}, 2.0f, x.options())));
}

// Convolution, batch norm (running statistics), ReLU and a linear head; optionally a host
// read in forward, which no graph can hold.
class Net final : public ImageClassifier {
 public:
  explicit Net(bool reads_on_host) : reads_on_host_(reads_on_host) {
    conv_ = register_module(
        "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 12, 3).padding(1).bias(false)));
    bn_ = register_module("bn", torch::nn::BatchNorm2d(12));
    fc_ = register_module("fc", torch::nn::Linear(12, 5));
  }
  at::Tensor forward(at::Tensor x) override {
    at::Tensor h = at::relu(bn_->forward(conv_->forward(x)));
    if (reads_on_host_ && h.sum().item<float>() == -1.0f) h = h * 2;
    return fc_->forward(h.mean({2, 3}));
  }

 private:
  bool reads_on_host_;
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

struct StepSetup {
  std::string optimizer = "adamw";
  bool fp16 = false;  // fp16 autocast with loss scaling (else bf16, no scaling)
  int accumulate = 1;
  double clip = 0;
  bool reads_on_host = false;
  int last_batch = 6;  // the samples of the last step's micro-batches (the others have 6)
};

struct StepRun {
  std::vector<float> losses;
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> buffers;
  int64_t skipped = 0;
  int graphs = 0;
  int64_t replays = 0;
};

// 12 optimizer steps on varied batches, the learning rate different in each.
StepRun Train(const StepSetup& setup, bool cuda_graphs) {
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setDeterministicCuDNN(true);
  torch::manual_seed(3);
  auto net = std::make_shared<Net>(setup.reads_on_host);
  net->to(at::kCUDA);
  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& item : net->named_parameters()) {
    names.push_back(item.key());
    parameters.push_back(item.value());
  }
  auto comm = FakeCommunicator::Group(1);
  auto buckets = *GradBuckets::Create(parameters, names, 1 << 20, comm[0].get(),
                                      /*fixed_addresses=*/cuda_graphs);
  OptimizerOptions optimizer_options;
  optimizer_options.kind = *ParseOptimizerKind(setup.optimizer);
  optimizer_options.momentum = 0.9;
  optimizer_options.weight_decay = 1e-3;
  auto optimizer = *FusedOptimizer::Create(parameters, optimizer_options);
  if (cuda_graphs) optimizer->KeepLearningRateOnDevice();
  LossScalerOptions scaler_options;
  scaler_options.enabled = setup.fp16;
  // The scale grows fourfold every two good steps, so it overflows again and again: in
  // uncaptured steps and in replayed ones.
  scaler_options.init_scale = 131072;
  scaler_options.growth_interval = 2;
  scaler_options.growth_factor = 4;
  auto scaler = *LossScaler::Create(scaler_options);
  TrainStepOptions options;
  options.label_smoothing = 0.1;
  options.clip_grad_norm = setup.clip;
  options.autocast = true;
  options.cuda_graphs = cuda_graphs;
  TrainStep step(*net, *buckets, *optimizer, scaler, parameters, options);

  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, setup.fp16 ? at::kHalf : at::kBFloat16);
  StepRun run;
  const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA);
  for (int s = 0; s < 12; ++s) {
    step.Begin(setup.accumulate);
    for (int m = 0; m < setup.accumulate; ++m) {
      at::manual_seed(100 + s * 8 + m);
      const at::Tensor images = at::randn({s == 11 ? setup.last_batch : 6, 3, 9, 9}, cuda)
                                    .contiguous(at::MemoryFormat::ChannelsLast)
                                    .to(setup.fp16 ? at::kHalf : at::kBFloat16);
      const at::Tensor labels =
          at::randint(0, 5, {s == 11 ? setup.last_batch : 6}, cuda.dtype(at::kLong));
      auto loss = step.MicroBatch(images, labels);
      EXPECT_TRUE(loss.ok()) << loss.status();
      if (!loss.ok()) break;
      run.losses.push_back(loss->item<float>());
    }
    const absl::Status finished = step.Finish(0.01 / (1 + s));
    EXPECT_TRUE(finished.ok()) << finished;
  }
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  c10::cuda::device_synchronize();
  for (const at::Tensor& p : parameters) run.parameters.push_back(p.detach().cpu());
  for (const at::Tensor& b : net->buffers()) run.buffers.push_back(b.cpu());
  run.skipped = step.skipped_steps();
  run.graphs = step.graphs_captured();
  run.replays = step.replays();
  return run;
}

void ExpectSameBits(const StepSetup& setup, bool expect_graphs = true) {
  const StepRun plain = Train(setup, false);
  const StepRun graphed = Train(setup, true);
  const std::string what = setup.optimizer + (setup.fp16 ? " fp16" : " bf16") + " accumulate " +
                           std::to_string(setup.accumulate) + (setup.clip > 0 ? " clipped" : "") +
                           (setup.reads_on_host ? " host read" : "") +
                           (setup.last_batch != 6 ? " smaller last batch" : "");
  std::printf(
      "[ graphs ] %s: %d graphs, %lld replays, %lld of 12 steps skipped; last loss %.6f / %.6f\n",
      what.c_str(), graphed.graphs, static_cast<long long>(graphed.replays),
      static_cast<long long>(graphed.skipped), plain.losses.back(), graphed.losses.back());
  if (expect_graphs) {
    EXPECT_GT(graphed.graphs, 0) << what;
    EXPECT_GT(graphed.replays, 0) << what;
  } else {
    EXPECT_EQ(graphed.graphs, 0) << what;
  }
  ASSERT_EQ(plain.losses.size(), graphed.losses.size()) << what;
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_EQ(plain.losses[i], graphed.losses[i]) << what << ": loss " << i;
  }
  for (size_t i = 0; i < plain.parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(plain.parameters[i], graphed.parameters[i]))
        << what << ": parameter " << i;
  }
  for (size_t i = 0; i < plain.buffers.size(); ++i) {
    EXPECT_TRUE(at::equal(plain.buffers[i], graphed.buffers[i])) << what << ": buffer " << i;
  }
  EXPECT_EQ(plain.skipped, graphed.skipped) << what;
}

TEST_F(CudaGraphTest, AReplayedStepGivesTheUncapturedStepsBits) {
  ExpectSameBits({"adamw", false, 1, 0.0});
  ExpectSameBits({"sgd", false, 1, 1.0});
  ExpectSameBits({"adamw", false, 3, 0.5});
}

TEST_F(CudaGraphTest, ABatchOfAnotherShapeRunsUncapturedWithTheSameBits) {
  StepSetup smaller;
  smaller.last_batch = 5;
  ExpectSameBits(smaller);
}

TEST_F(CudaGraphTest, LossScalingSkipsOnTheDeviceAsOnTheHost) {
  StepSetup fp16{"adamw", true, 1, 1.0};
  const StepRun plain = Train(fp16, false);
  EXPECT_GE(plain.skipped, 2) << "the setup must overflow, else nothing is tested";
  ExpectSameBits(fp16);
  ExpectSameBits({"sgd", true, 2, 0.0});
}

TEST_F(CudaGraphTest, AModelThatReadsOnTheHostRunsUncapturedWithTheSameBits) {
  StepSetup host_read;
  host_read.reads_on_host = true;
  ExpectSameBits(host_read, /*expect_graphs=*/false);
}

}  // namespace
}  // namespace stoker::trainer
