// GPU tests of the CUDA batch feeder (tag gpu): slots go back only after their copies
// completed, copies overlap compute, the fused normalisation is exact, and the GPU's wait
// for input is measured.
#include "trainer/input/cuda_batch_feeder.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <random>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

// A ring in host memory that behaves like the data service at its most hostile: the
// moment a slot is released it is overwritten with poison, as a producer refilling it
// at once would. A copy still reading the slot would then carry poison to the GPU.
class PoisoningSource final : public BatchSource {
 public:
  // With `refill` false the slots are written once here and never poisoned: a source
  // that costs nothing, for timing. Each batch takes `delay` to arrive.
  PoisoningSource(int slots, int batch, int image_size, int batches, bool refill = true,
                  absl::Duration delay = absl::ZeroDuration())
      : slot_bytes_(static_cast<size_t>(batch) * image_size * image_size * 3),
        batch_(batch),
        batches_(batches),
        refill_(refill),
        delay_(delay),
        memory_(slots * (slot_bytes_ + batch * sizeof(int32_t)) + 4096) {
    for (int i = 0; i < slots; ++i) free_.push_back(i);
    if (!refill_) std::memset(memory_.data(), 7, memory_.size());
  }

  // The bytes batch `step` carries: a pure function of (step, offset).
  static uint8_t Byte(int64_t step, size_t offset) {
    return static_cast<uint8_t>((offset * 2654435761u + step * 97u) >> 13);
  }

  absl::StatusOr<data_service::BatchView> Acquire(absl::Duration) override {
    if (next_ >= batches_) return absl::OutOfRangeError("no more batches");
    if (free_.empty()) return absl::DeadlineExceededError("ring empty");
    absl::SleepFor(delay_);
    const int slot = free_.front();
    free_.pop_front();
    uint8_t* images = SlotImages(slot);
    if (refill_) {
      for (size_t i = 0; i < slot_bytes_; ++i) images[i] = Byte(next_, i);
    }
    int32_t* labels = SlotLabels(slot);
    for (int i = 0; i < batch_; ++i) labels[i] = static_cast<int32_t>(next_ * 1000 + i);
    data_service::BatchView view;
    view.slot = slot;
    view.epoch = 0;
    view.step = next_++;
    view.count = batch_;
    view.images = images;
    view.labels = labels;
    return view;
  }

  absl::Status Release(const data_service::BatchView& batch) override {
    if (refill_) std::memset(SlotImages(batch.slot), 0xAA, slot_bytes_);
    free_.push_back(batch.slot);
    return absl::OkStatus();
  }

  void* memory_base() const override { return const_cast<uint8_t*>(memory_.data()); }
  size_t memory_bytes() const override { return memory_.size(); }

 private:
  uint8_t* SlotImages(int slot) { return memory_.data() + slot * (slot_bytes_ + batch_ * 4); }
  int32_t* SlotLabels(int slot) { return reinterpret_cast<int32_t*>(SlotImages(slot) + slot_bytes_); }

  size_t slot_bytes_;
  int batch_;
  int batches_;
  bool refill_;
  absl::Duration delay_;
  std::vector<uint8_t> memory_;
  std::deque<int> free_;
  int64_t next_ = 0;
};

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

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

FeederOptions IdentityOptions(int batch, int image_size) {
  FeederOptions options;
  options.batch_size = batch;
  options.image_size = image_size;
  options.dtype = at::kFloat;
  for (int c = 0; c < 3; ++c) {
    options.mean[c] = 0.0f;       // (v / 255 - 0) / (1 / 255) == v: the bytes, as floats
    options.stddev[c] = 1.0f / 255.0f;
  }
  options.timeout = absl::Seconds(30);
  return options;
}

TEST(CudaBatchFeederTest, SlotIsNotReleasedBeforeItsCopyCompletes) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const int batch = 64, size = 224, batches = 24;
  PoisoningSource source(/*slots=*/3, batch, size, batches);
  CudaFeederStats stats;
  auto feeder = MakeCudaBatchFeeder(&source, IdentityOptions(batch, size), 0, &stats);
  ASSERT_TRUE(feeder.ok()) << feeder.status();
  EXPECT_TRUE(stats.pinned);
  for (int step = 0; step < batches; ++step) {
    auto next = (*feeder)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_EQ(next->step, step);
    // channels_last [N, 3, H, W] is NHWC in memory: permute back and compare bytes.
    at::Tensor bytes = next->images.permute({0, 2, 3, 1}).contiguous().to(at::kByte).cpu();
    const uint8_t* got = bytes.data_ptr<uint8_t>();
    int64_t wrong = 0;
    for (size_t i = 0; i < static_cast<size_t>(bytes.numel()); ++i) {
      wrong += got[i] != PoisoningSource::Byte(step, i);
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
  PoisoningSource source(3, batch, size, 1);
  FeederOptions options = IdentityOptions(batch, size);
  options.dtype = at::kBFloat16;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};
  std::copy(mean, mean + 3, options.mean);
  std::copy(stddev, stddev + 3, options.stddev);
  auto feeder = MakeCudaBatchFeeder(&source, options, 0);
  ASSERT_TRUE(feeder.ok()) << feeder.status();
  auto next = (*feeder)->Next();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->images.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(next->images.is_contiguous(at::MemoryFormat::ChannelsLast));
  at::Tensor raw = at::empty({batch, size, size, 3}, at::kByte);
  for (int64_t i = 0; i < raw.numel(); ++i) raw.data_ptr<uint8_t>()[i] = PoisoningSource::Byte(0, i);
  at::Tensor expected = raw.to(at::kFloat).div(255).sub(at::tensor({mean[0], mean[1], mean[2]}))
                            .div(at::tensor({stddev[0], stddev[1], stddev[2]})).permute({0, 3, 1, 2});
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
  PoisoningSource copy_source(4, batch, size, batches, /*refill=*/false);
  auto copy_feeder = MakeCudaBatchFeeder(&copy_source, IdentityOptions(batch, size), 0);
  ASSERT_TRUE(copy_feeder.ok()) << copy_feeder.status();
  ASSERT_TRUE((*copy_feeder)->Next().ok());  // the first copy starts the stream
  const float copy_ms = time_ms([&] {
    for (int i = 1; i < batches; ++i) ASSERT_TRUE((*copy_feeder)->Next().ok());
  }) / (batches - 1);

  // Compute per step sized to about one copy.
  const float mm_ms = time_ms([&] { compute(4); }) / 4;
  const int per_step = std::max(1, static_cast<int>(copy_ms / mm_ms + 0.5f));
  const float compute_ms = time_ms([&] { compute(per_step * (batches - 1)); });

  PoisoningSource both_source(4, batch, size, batches, /*refill=*/false);
  auto both_feeder = MakeCudaBatchFeeder(&both_source, IdentityOptions(batch, size), 0);
  ASSERT_TRUE(both_feeder.ok());
  ASSERT_TRUE((*both_feeder)->Next().ok());
  const float both_ms = time_ms([&] {
    for (int i = 1; i < batches; ++i) {
      ASSERT_TRUE((*both_feeder)->Next().ok());
      compute(per_step);
    }
  });
  const float serial_ms = compute_ms + copy_ms * (batches - 1);
  std::printf("per batch: copy %.3f ms; %d step(s): compute %.2f ms, both %.2f ms, serial would be %.2f ms\n",
              copy_ms, batches - 1, compute_ms, both_ms, serial_ms);
  EXPECT_LT(both_ms, compute_ms + 0.5f * (serial_ms - compute_ms)) << "copies did not overlap compute";
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
  auto run = [&](PoisoningSource& source, int per_step) {
    Waits waits;
    auto feeder = MakeCudaBatchFeeder(&source, IdentityOptions(batch, size), 0);
    EXPECT_TRUE(feeder.ok()) << feeder.status();
    if (!feeder.ok()) return waits;
    cudaDeviceSynchronize();
    const absl::Time start = absl::Now();
    for (int i = 0; i < batches; ++i) {
      auto next = (*feeder)->Next();
      EXPECT_TRUE(next.ok()) << next.status();
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
  PoisoningSource slow(4, batch, size, batches, /*refill=*/false, absl::Milliseconds(20));
  const Waits starved = run(slow, 0);
  // Busy: each step about 15 ms of compute, the source instant.
  PoisoningSource fast(4, batch, size, batches, /*refill=*/false);
  const int per_step = std::max(1, static_cast<int>(15.0 / mm_ms + 0.5));
  const Waits busy = run(fast, per_step);
  std::printf("GPU wait for input over %d batches: starved %.1f ms of %.1f ms (host %.1f ms); "
              "busy (%d products of %.2f ms per step) %.2f ms of %.1f ms (host %.1f ms)\n",
              batches, starved.gpu_ms, starved.wall_ms, starved.host_ms, per_step, mm_ms,
              busy.gpu_ms, busy.wall_ms, busy.host_ms);
  EXPECT_EQ(starved.measured, batches);
  // The waits of the last batch or two are still unread when the run ends.
  EXPECT_GT(starved.gpu_ms, 0.7 * 20.0 * (batches - 3));
  EXPECT_LE(starved.gpu_ms, starved.wall_ms);
  EXPECT_LT(busy.gpu_ms, 0.05 * busy.wall_ms);
  EXPECT_GT(busy.host_ms, 0.5 * busy.wall_ms) << "the host should have run ahead of the GPU";
}

}  // namespace
}  // namespace stoker::trainer
