// GPU tests of the CUDA batch feeder (tag gpu): the feeder conformance suite, slots go back
// only after their copies completed, copies overlap compute, the fused normalisation is
// exact, and the GPU's wait for input is measured.
#include "trainer/input/cuda_batch_feeder.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <random>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/input/fake_batch_source.h"
#include "trainer/input/feeder_conformance.h"

namespace stoker::trainer {
namespace {

// A FakeBatchSource of `slots` slots that serves `batches` batches of `batch` images of
// `image_size` pixels. With `refill` false the slots are written once and never poisoned: a
// source that costs nothing, for timing. Each batch takes `delay` to arrive.
FakeBatchSourceOptions Ring(int slots, int batch, int image_size, int batches, bool refill = true,
                            absl::Duration delay = absl::ZeroDuration()) {
  FakeBatchSourceOptions options{slots, batch, image_size, batches};
  options.refill = refill;
  options.delay = delay;
  return options;
}

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class CudaTarget final : public FeederConformanceTarget {
 public:
  std::string MissingHardware() const override { return HaveGpu() ? "" : "needs a GPU"; }
  absl::StatusOr<std::unique_ptr<BatchFeeder>> Make(BatchSource* source,
                                                    const FeederOptions& options) override {
    return MakeCudaBatchFeeder(source, options, /*device=*/0);
  }
  c10::Device device() const override { return c10::Device(c10::kCUDA, 0); }
  bool decodes_deferred_samples() const override { return true; }
  bool measures_gpu_input_wait() const override { return true; }
};

INSTANTIATE_TEST_SUITE_P(
    Cuda, FeederConformanceTest,
    (::stoker::testing::OnlyTarget<FeederConformanceTarget, CudaTarget>("cuda")),
    FeederConformanceParamName);

// GPU work for a step: compute(n) enqueues n products of 4096 x 4096 fp32 matrices on the
// current stream.
class MatrixProducts {
 public:
  MatrixProducts()
      : a_(at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA))),
        b_(at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA))) {}
  void operator()(int n) {
    for (int i = 0; i < n; ++i) b_ = at::mm(a_, b_).mul_(1e-3);
  }

 private:
  at::Tensor a_;
  at::Tensor b_;
};

TEST(CudaBatchFeederTest, SlotIsNotReleasedBeforeItsCopyCompletes) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const int batch = 64, size = 224, batches = 24;
  FakeBatchSource source(Ring(/*slots=*/3, batch, size, batches));
  CudaFeederStats stats;
  auto feeder = MakeCudaBatchFeeder(&source, IdentityFeederOptions(batch, size), 0, &stats);
  ASSERT_OK(feeder);
  EXPECT_TRUE(stats.pinned);
  for (int step = 0; step < batches; ++step) {
    auto next = (*feeder)->Next();
    ASSERT_OK(next);
    ASSERT_EQ(next->step, step);
    // channels_last [N, 3, H, W] is NHWC in memory: permute back and compare bytes.
    at::Tensor bytes = next->images.permute({0, 2, 3, 1}).contiguous().to(at::kByte).cpu();
    const uint8_t* got = bytes.data_ptr<uint8_t>();
    int64_t wrong = 0;
    for (size_t i = 0; i < static_cast<size_t>(bytes.numel()); ++i) {
      wrong += got[i] != FakeBatchSource::Byte(step, i);
    }
    EXPECT_EQ(wrong, 0) << "batch " << step << " reached the GPU with " << wrong
                        << " bytes overwritten after release";
    at::Tensor labels = next->labels.cpu();
    EXPECT_EQ(labels[batch - 1].item<int64_t>(), step * 1000 + batch - 1);
  }
}

TEST(CudaBatchFeederTest, NormalisesToBf16ChannelsLast) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const int batch = 4, size = 32;
  FakeBatchSource source(Ring(3, batch, size, 1));
  FeederOptions options = IdentityFeederOptions(batch, size);
  options.dtype = at::kBFloat16;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};
  std::copy(mean, mean + 3, options.mean);
  std::copy(stddev, stddev + 3, options.stddev);
  auto feeder = MakeCudaBatchFeeder(&source, options, 0);
  ASSERT_OK(feeder);
  auto next = (*feeder)->Next();
  ASSERT_OK(next);
  EXPECT_EQ(next->images.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(next->images.is_contiguous(at::MemoryFormat::ChannelsLast));
  at::Tensor raw = at::empty({batch, size, size, 3}, at::kByte);
  for (int64_t i = 0; i < raw.numel(); ++i)
    raw.data_ptr<uint8_t>()[i] = FakeBatchSource::Byte(0, i);
  at::Tensor expected = raw.to(at::kFloat)
                            .div(255)
                            .sub(at::tensor({mean[0], mean[1], mean[2]}))
                            .div(at::tensor({stddev[0], stddev[1], stddev[2]}))
                            .permute({0, 3, 1, 2});
  at::Tensor got = next->images.to(at::kFloat).cpu();
  EXPECT_LT((got - expected).abs().max().item<float>(), 0.02f);  // bf16 rounding of |x| <= 2.7
}

// Copy stream and compute stream run side by side: a training-like loop (take a batch,
// compute) takes about as long as its computation alone, not computation plus copies.
TEST(CudaBatchFeederTest, CopiesOverlapCompute) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const int batch = 256, size = 224, batches = 16;
  MatrixProducts compute;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto time_ms = [&](auto&& body) {
    cudaDeviceSynchronize();
    cudaEventRecord(start, stream);
    body();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return ms;
  };
  compute(3);  // warm-up

  // Copies alone: the slots are filled once, so only copying and normalising are timed.
  FakeBatchSource copy_source(Ring(4, batch, size, batches, /*refill=*/false));
  auto copy_feeder = MakeCudaBatchFeeder(&copy_source, IdentityFeederOptions(batch, size), 0);
  ASSERT_OK(copy_feeder);
  ASSERT_OK((*copy_feeder)->Next());  // the first copy starts the stream
  const float copy_ms = time_ms([&] {
                          for (int i = 1; i < batches; ++i)
                            ASSERT_TRUE((*copy_feeder)->Next().ok());
                        }) /
                        (batches - 1);

  // Compute per step sized to about one copy.
  const float mm_ms = time_ms([&] { compute(4); }) / 4;
  const int per_step = std::max(1, static_cast<int>(copy_ms / mm_ms + 0.5f));
  const float compute_ms = time_ms([&] { compute(per_step * (batches - 1)); });

  FakeBatchSource both_source(Ring(4, batch, size, batches, /*refill=*/false));
  auto both_feeder = MakeCudaBatchFeeder(&both_source, IdentityFeederOptions(batch, size), 0);
  ASSERT_OK(both_feeder);
  ASSERT_OK((*both_feeder)->Next());
  const float both_ms = time_ms([&] {
    for (int i = 1; i < batches; ++i) {
      ASSERT_OK((*both_feeder)->Next());
      compute(per_step);
    }
  });
  const float serial_ms = compute_ms + copy_ms * (batches - 1);
  std::printf(
      "per batch: copy %.3f ms; %d step(s): compute %.2f ms, both %.2f ms, serial would be %.2f "
      "ms\n",
      copy_ms, batches - 1, compute_ms, both_ms, serial_ms);
  EXPECT_LT(both_ms, compute_ms + 0.5f * (serial_ms - compute_ms))
      << "copies did not overlap compute";
}

// Note [The GPU's wait for input]: a GPU with nothing to do but wait for a slow source
// waits for nearly all of its time; a GPU whose steps take longer than the input barely
// waits, although the host then waits in Next() for most of the run.
TEST(CudaBatchFeederTest, MeasuresTheGpusWaitForInput) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const int batch = 32, size = 64, batches = 24;
  MatrixProducts compute;
  // Runs `batches` batches, each followed by `per_step` products; returns the GPU's wait
  // for input (and the host's) summed over the batches, and the wall time.
  struct Waits {
    double gpu_ms = 0, host_ms = 0, wall_ms = 0;
    int measured = 0;  // batches that carried a GPU wait
  };
  auto run = [&](FakeBatchSource& source, int per_step) {
    Waits waits;
    auto feeder = MakeCudaBatchFeeder(&source, IdentityFeederOptions(batch, size), 0);
    EXPECT_OK(feeder);
    if (!feeder.ok()) return waits;
    cudaDeviceSynchronize();
    const absl::Time start = absl::Now();
    for (int i = 0; i < batches; ++i) {
      auto next = (*feeder)->Next();
      EXPECT_OK(next);
      if (!next.ok()) return waits;
      EXPECT_TRUE(next->gpu_input_wait.has_value());
      if (next->gpu_input_wait.has_value()) {
        waits.gpu_ms += absl::ToDoubleMilliseconds(*next->gpu_input_wait);
        ++waits.measured;
      }
      waits.host_ms += absl::ToDoubleMilliseconds(next->data_wait);
      compute(per_step);
    }
    cudaDeviceSynchronize();
    waits.wall_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    return waits;
  };
  compute(3);  // warm-up
  cudaDeviceSynchronize();
  const absl::Time timed = absl::Now();
  compute(20);
  cudaDeviceSynchronize();
  const double mm_ms = absl::ToDoubleMilliseconds(absl::Now() - timed) / 20;

  // Starved: 20 ms per batch from the source, no compute.
  FakeBatchSource slow(Ring(4, batch, size, batches, /*refill=*/false, absl::Milliseconds(20)));
  const Waits starved = run(slow, 0);
  // Busy: each step about 15 ms of compute, the source instant.
  FakeBatchSource fast(Ring(4, batch, size, batches, /*refill=*/false));
  const int per_step = std::max(1, static_cast<int>(15.0 / mm_ms + 0.5));
  const Waits busy = run(fast, per_step);
  std::printf(
      "GPU wait for input over %d batches: starved %.1f ms of %.1f ms (host %.1f ms); "
      "busy (%d products of %.2f ms per step) %.2f ms of %.1f ms (host %.1f ms)\n",
      batches, starved.gpu_ms, starved.wall_ms, starved.host_ms, per_step, mm_ms, busy.gpu_ms,
      busy.wall_ms, busy.host_ms);
  EXPECT_EQ(starved.measured, batches);
  // The waits of the last batch or two are still unread when the run ends.
  EXPECT_GT(starved.gpu_ms, 0.7 * 20.0 * (batches - 3));
  EXPECT_LE(starved.gpu_ms, starved.wall_ms);
  EXPECT_LT(busy.gpu_ms, 0.05 * busy.wall_ms);
  EXPECT_GT(busy.host_ms, 0.5 * busy.wall_ms) << "the host should have run ahead of the GPU";
}

}  // namespace
}  // namespace stoker::trainer
