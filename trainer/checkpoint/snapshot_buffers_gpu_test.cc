// Snapshot buffers on the GPU (Note [Snapshot buffers] in training_state.h): a snapshot
// enqueued without a host sync, followed at once by a forward pass (which changes batch
// norm's running statistics) and, after GateUpdates, by optimizer steps (which change the
// parameters and the moments in place), is the checkpoint of the state it was taken of, bit
// for bit, when sealed on another thread, the FP8 scaling state (which forward passes change)
// included; the buffers are reused by the next snapshot; and the host time a snapshot takes
// is printed against the time its copies take.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/training_run_testing.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/nn/builtin_models.h"
#include "trainer/nn/fp8_state.h"

namespace stoker::trainer {
namespace {

using GpuRun = testing::TrainingRun;

// ResNet-18 with the FP8 scaling state of two layers, which each forward pass changes on
// the current stream, as Fp8Linear's kernels do.
class Fp8Resnet : public ImageClassifier {
 public:
  Fp8Resnet() : net_(register_module("net", *MakeBuiltinModel("resnet18", 10))) {
    for (const char* name : {"fc1.weight", "fc2.weight"}) {
      states_.push_back(c10::make_intrusive<Fp8LinearState>(Fp8Recipe{}, name));
    }
  }
  torch::Tensor forward(torch::Tensor images) override {
    for (const auto& state : states_) state->DeviceState(images.device()).add_(0.5);
    return net_->forward(images);
  }
  std::vector<c10::intrusive_ptr<Fp8LinearState>> Fp8States() override { return states_; }
  using ImageClassifier::to;
  void to(torch::Device device, bool non_blocking) override {
    ImageClassifier::to(device, non_blocking);
    for (const auto& state : states_) state->PlaceOn(device);
  }

 private:
  std::shared_ptr<ImageClassifier> net_;
  std::vector<c10::intrusive_ptr<Fp8LinearState>> states_;
};

// ResNet-18 (with FP8 scaling state: `fp8`) on the GPU in channels_last (its conv weights
// and their moments are not contiguous: staged), with batch norm (buffers: staged), under
// AdamW.
GpuRun MakeGpuRun(bool fp8 = false) {
  torch::manual_seed(3);
  std::shared_ptr<ImageClassifier> model =
      fp8 ? std::make_shared<Fp8Resnet>() : *MakeBuiltinModel("resnet18", 10);
  model->to(torch::kCUDA);
  for (auto& p : model->parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
  LossScalerOptions scaler_options;
  scaler_options.enabled = false;
  return testing::MakeTrainingRun(model, scaler_options);
}

void Forward(GpuRun& run) {
  for (const at::Tensor& p : run.model->parameters()) p.mutable_grad() = at::Tensor();
  const at::Tensor x = at::randn({32, 3, 64, 64}, at::TensorOptions().device(at::kCUDA))
                           .contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor y =
      at::randint(0, 10, {32}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
  at::cross_entropy_loss(run.model->forward(x), y).backward();
}

void Step(GpuRun& run) {
  Forward(run);
  run.optimizer->Step();
}

RunGeometry Geometry() {
  RunGeometry geometry;
  geometry.model = "resnet18";
  geometry.num_classes = 10;
  geometry.image_size = 64;
  geometry.world_size = 1;
  geometry.batch_size = 32;
  geometry.optimizer = "adamw";
  return geometry;
}

// Seals `snapshot` on another thread, as the writer thread does, and joins its parts.
std::string SealElsewhere(CheckpointWriter snapshot) {
  std::string joined;
  absl::Status waited;
  std::thread writer([&] {
    waited = snapshot.WaitForHeldBytes();
    const SealedCheckpoint sealed = std::move(snapshot).Seal(/*threads=*/4);
    for (absl::string_view part : sealed.parts()) joined.append(part.data(), part.size());
  });
  writer.join();
  EXPECT_OK(waited);
  return joined;
}

class SnapshotBuffersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(SnapshotBuffersTest, ASnapshotIsTheStateItWasTakenOfWhileTrainingGoesOn) {
  GpuRun run = MakeGpuRun();
  run.model->train();
  Step(run);
  Step(run);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<SnapshotBuffers> buffers,
                       SnapshotBuffers::Create(run.refs()));
  ASSERT_NE(buffers, nullptr);
  EXPECT_GT(buffers->staging_bytes(), 0) << "batch norm's buffers and channels_last weights";
  int64_t state_bytes = 0;
  for (const auto& p : run.model->parameters()) state_bytes += 3 * p.nbytes();
  EXPECT_GE(buffers->host_bytes(), state_bytes);

  for (int round = 0; round < 3; ++round) {
    const RunPosition position{0, 2 + round, 2 + round};
    ASSERT_OK_AND_ASSIGN(const std::string then,
                         EncodeCheckpoint(run.refs(), position, Geometry()));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_OK_AND_ASSIGN(CheckpointWriter snapshot,
                         SnapshotCheckpoint(run.refs(), position, Geometry(),
                                            /*own_copies=*/true, buffers));
    const double enqueued_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // Training goes on at once: forward and backward change the running statistics; the
    // optimizer steps wait on the device for the copies.
    Forward(run);
    ASSERT_OK(buffers->GateUpdates());
    run.optimizer->Step();
    Step(run);
    const std::string written = SealElsewhere(std::move(snapshot));
    const double copied_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(written == then) << "round " << round
                                 << ": the snapshot is not the state it was taken of";
    ASSERT_OK_AND_ASSIGN(const std::string now, EncodeCheckpoint(run.refs(), position, Geometry()));
    EXPECT_FALSE(now == then) << "the state did not change after the snapshot";
    std::printf(
        "[ snapshot ] round %d: %.1f MB (%.1f MB staged on the device): enqueued in "
        "%.3f ms on the host, copied and sealed after %.1f ms\n",
        round, then.size() / 1e6, buffers->staging_bytes() / 1e6, enqueued_ms, copied_ms);
  }
}

// Note [FP8 scaling state in checkpoints] (trainer/nn/fp8_state.h).
TEST_F(SnapshotBuffersTest, ASnapshotHoldsTheFp8ScalingStateOfItsStep) {
  GpuRun run = MakeGpuRun(/*fp8=*/true);
  run.model->train();
  Step(run);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<SnapshotBuffers> buffers,
                       SnapshotBuffers::Create(run.refs()));
  ASSERT_NE(buffers, nullptr);
  const RunPosition position{0, 1, 1};
  ASSERT_OK_AND_ASSIGN(const std::string then, EncodeCheckpoint(run.refs(), position, Geometry()));
  ASSERT_OK_AND_ASSIGN(
      CheckpointWriter snapshot,
      SnapshotCheckpoint(run.refs(), position, Geometry(), /*own_copies=*/true, buffers));
  Forward(run);  // changes the FP8 state before the copies may have run
  ASSERT_OK(buffers->GateUpdates());
  run.optimizer->Step();
  const std::string written = SealElsewhere(std::move(snapshot));
  EXPECT_TRUE(written == then) << "the snapshot is not the state it was taken of";
  ASSERT_OK_AND_ASSIGN(CheckpointReader checkpoint, CheckpointReader::Parse(written, "snapshot"));
  for (const auto& state : run.model->Fp8States()) {
    ASSERT_OK_AND_ASSIGN(CheckpointTensor stored,
                         checkpoint.Tensor("fp8/" + state->name() + "/scaling"));
    ASSERT_EQ(stored.shape, state->scaling().sizes().vec());
    // One forward pass (+0.5) before the snapshot, the initial scale 1.
    float scale = 0;
    std::memcpy(&scale, stored.data.data() + sizeof(float) * (Fp8Recipe{}.history + 1),
                sizeof(float));
    EXPECT_EQ(scale, 1.5f) << state->name();
  }
}

TEST_F(SnapshotBuffersTest, TheGateIsOneWaitOnTheDeviceAndNoHostSync) {
  GpuRun run = MakeGpuRun();
  run.model->train();
  Step(run);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<SnapshotBuffers> buffers,
                       SnapshotBuffers::Create(run.refs()));
  ASSERT_NE(buffers, nullptr);
  // A long kernel queue on the compute stream: a host sync in the snapshot or the gate
  // would wait for it.
  const at::Tensor big = at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  at::Tensor product = big;
  for (int i = 0; i < 200; ++i) product = at::mm(product, big) * 1e-3;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(
      CheckpointWriter snapshot,
      SnapshotCheckpoint(run.refs(), {0, 1, 1}, Geometry(), /*own_copies=*/true, buffers));
  ASSERT_OK(buffers->GateUpdates());
  ASSERT_OK(buffers->GateUpdates());  // nothing more
  const double host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const bool queue_still_running =
      cudaStreamQuery(c10::cuda::getCurrentCUDAStream().stream()) == cudaErrorNotReady;
  std::printf(
      "[ snapshot ] behind a queue of 200 matrix products: the snapshot and its gate took "
      "%.3f ms on the host; the queue was %s\n",
      host_ms, queue_still_running ? "still running" : "done");
  EXPECT_TRUE(queue_still_running) << "the snapshot waited for the device";
  ASSERT_OK(snapshot.WaitForHeldBytes());
}

}  // namespace
}  // namespace stoker::trainer
