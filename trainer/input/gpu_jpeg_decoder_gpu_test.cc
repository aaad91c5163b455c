// GPU tests of deferred samples (tag gpu; Note [Deferred samples] in
// data_service/image/deferred_jpeg.h): nvJPEG-decoded samples against the data service's
// CPU pipeline on the same (bytes, geometry), bit-identical hybrid batches across runs,
// a JPEG that only nvJPEG finds bad, reported by index to the bad-data policy, counted
// and replaced by the CUDA feeder, or stopping the run under --bad_files=fail, and a batch
// decoded in rounds within a small arena, as in one.
#include "trainer/input/gpu_jpeg_decoder.h"

#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_work_queues.h"
#include "data_service/image/deferred_jpeg.h"
#include "data_service/image/transforms.h"
#include "data_service/ring/ring_client.h"
#include "data_service/ring/wire_types.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"
#include "trainer/input/cuda_batch_feeder.h"
#include "trainer/input/fake_batch_source.h"

namespace stoker::trainer {
namespace {

namespace image = data_service::image;
using data_service::BatchView;
using data_service::SampleKind;

// The bound on a GPU-decoded sample's distance from the CPU path's (Pillow's
// reconstruction): the two JPEG decoders and the resamplers' rounding differ, not the
// geometry. A wrong crop, flip or channel order gives well under 20 dB.
constexpr double kMinPsnrDb = 30.0;

// As the trainer does, before the first CUDA call (Note [Hardware work queues]).
const std::string kWorkQueues = UseAllCudaWorkQueues();

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

double Psnr(const uint8_t* a, const uint8_t* b, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  if (sum == 0.0) return 99.0;
  return 10.0 * std::log10(255.0 * 255.0 / (sum / n));
}

struct TestImage {
  int width;
  int height;
  int subsampling;
};

std::vector<std::vector<uint8_t>> TestJpegs() {
  const TestImage kinds[] = {{500, 375, TJSAMP_420},  {375, 500, TJSAMP_422},
                             {640, 480, TJSAMP_444},  {301, 203, TJSAMP_420},
                             {1024, 768, TJSAMP_420}, {256, 256, TJSAMP_444}};
  std::vector<std::vector<uint8_t>> jpegs;
  uint64_t seed = 1;
  for (const TestImage& k : kinds) {
    jpegs.push_back(data_service::test_util::EncodeJpeg(
        k.width, k.height, data_service::test_util::PhotoLikeImage(k.width, k.height, seed++), 90,
        k.subsampling, false));
  }
  return jpegs;
}

// A slot of `count` samples in host memory, every one deferred: sample i is jpegs[i %
// size] with the geometry of SampleKey{seed, epoch, i}.
struct HostBatch {
  int image_size = 0;
  std::vector<uint8_t> images;
  std::vector<uint8_t> kinds;
  std::vector<int32_t> labels;
  std::vector<int64_t> indices;
  std::vector<data_service::DeferredSampleHeader> headers;  // the ring client's checked copy
  std::vector<image::SampleKey> keys;

  BatchView View() const {
    BatchView view;
    view.slot = 0;
    view.count = static_cast<int32_t>(kinds.size());
    view.images = images.data();
    view.labels = labels.data();
    view.sample_indices = indices.data();
    view.sample_kinds = kinds.data();
    view.deferred_headers = headers.data();
    view.deferred_count = static_cast<int32_t>(
        std::count(kinds.begin(), kinds.end(), static_cast<uint8_t>(SampleKind::kDeferredJpeg)));
    return view;
  }
};

// With `pixels_every` > 0, every pixels_every-th sample is decoded here, by the data
// service's CPU path, and stored as pixels: a hybrid batch.
HostBatch MakeBatch(const std::vector<std::vector<uint8_t>>& jpegs, int count,
                    const image::TransformSpec& spec, int pixels_every = 0) {
  HostBatch b;
  b.image_size = spec.output_size;
  const size_t sample_bytes = static_cast<size_t>(spec.output_size) * spec.output_size * 3;
  b.images.assign(sample_bytes * count, 0);
  for (int i = 0; i < count; ++i) {
    const std::vector<uint8_t>& jpeg = jpegs[i % jpegs.size()];
    const image::SampleKey key{77, 2, i};
    if (pixels_every > 0 && i % pixels_every == 0) {
      image::TransformScratch scratch;
      EXPECT_TRUE(
          image::DecodeAndTransform(jpeg, spec, key, scratch, b.images.data() + sample_bytes * i)
              .ok());
      b.kinds.push_back(static_cast<uint8_t>(SampleKind::kPixels));
      b.headers.emplace_back();
      b.labels.push_back(i);
      b.indices.push_back(1000 + i);
      b.keys.push_back(key);
      continue;
    }
    std::optional<data_service::DeferredSampleHeader> header =
        image::PlanDeferredJpeg(jpeg, spec, key, sample_bytes);
    EXPECT_TRUE(header.has_value()) << "sample " << i;
    if (!header.has_value()) continue;
    image::WriteDeferredSample(*header, jpeg, b.images.data() + sample_bytes * i);
    data_service::RingRequest request;
    request.image_size = spec.output_size;
    EXPECT_TRUE(data_service::internal::CheckDeferredHeader(*header, request).ok());
    b.headers.push_back(*header);
    b.kinds.push_back(static_cast<uint8_t>(SampleKind::kDeferredJpeg));
    b.labels.push_back(i);
    b.indices.push_back(1000 + i);
    b.keys.push_back(key);
  }
  return b;
}

std::vector<uint8_t> DecodeOnGpu(GpuJpegDecoder& decoder, const HostBatch& batch,
                                 std::vector<int32_t>* failed = nullptr) {
  const size_t bytes = batch.images.size();
  uint8_t* device = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(device, 0, bytes), cudaSuccess);
  absl::StatusOr<std::vector<RefusedJpeg>> refused = decoder.Decode(batch.View(), device, nullptr);
  EXPECT_TRUE(refused.ok()) << refused.status();
  if (failed != nullptr && refused.ok()) {
    failed->clear();
    for (const RefusedJpeg& r : *refused) {
      failed->push_back(r.position);
      std::printf("[ hybrid ] refused sample %d: %s\n", r.position, r.why.c_str());
    }
  }
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device);
  return host;
}

TEST(GpuJpegDecoderTest, GpuDecodedSamplesMatchCpuDecodedOnes) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const std::vector<std::vector<uint8_t>> jpegs = TestJpegs();
  for (image::TransformSpec spec :
       {image::TransformSpec::Train(224), image::TransformSpec::Eval(256, 224)}) {
    const HostBatch batch = MakeBatch(jpegs, 24, spec);
    absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> decoder = GpuJpegDecoder::Create(0, 24, 224);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    const std::vector<uint8_t> gpu = DecodeOnGpu(**decoder, batch);
    // The CPU path with Pillow's reconstruction (the accurate IDCT, fancy upsampling).
    image::TransformSpec exact = spec;
    exact.decode = image::DecodeOptions();
    image::TransformScratch scratch;
    const size_t sample_bytes = 224 * 224 * 3;
    std::vector<uint8_t> cpu(sample_bytes);
    double worst = 99.0;
    double total = 0.0;
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      ASSERT_TRUE(image::DecodeAndTransform(jpegs[i % jpegs.size()], exact, batch.keys[i], scratch,
                                            cpu.data())
                      .ok());
      const double psnr = Psnr(gpu.data() + sample_bytes * i, cpu.data(), sample_bytes);
      EXPECT_GE(psnr, kMinPsnrDb) << (spec.mode == image::TransformMode::kTrain ? "train" : "eval")
                                  << " sample " << i;
      worst = std::min(worst, psnr);
      total += psnr;
    }
    std::printf(
        "[ hybrid ] %s: GPU vs CPU (Pillow reconstruction) PSNR min %.1f dB, mean %.1f "
        "dB over %zu samples; hardware backend: %s, %lld of them left to the CUDA backend\n",
        spec.mode == image::TransformMode::kTrain ? "train" : "eval", worst,
        total / batch.keys.size(), batch.keys.size(), (*decoder)->hardware() ? "yes" : "no",
        static_cast<long long>((*decoder)->cuda_backend_decodes()));
  }
}

// Runs one batch through a fresh CUDA feeder: the normalised images as uint8-valued floats.
at::Tensor FeedOnce(const HostBatch& batch, CudaFeederStats* stats = nullptr);

TEST(GpuJpegDecoderTest, HybridBatchesAreIdenticalAcrossRuns) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const HostBatch all = MakeBatch(TestJpegs(), 32, image::TransformSpec::Train(160));
  absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> first = GpuJpegDecoder::Create(0, 32, 160);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<uint8_t> a = DecodeOnGpu(**first, all);
  const std::vector<uint8_t> b = DecodeOnGpu(**first, all);
  absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> second = GpuJpegDecoder::Create(0, 32, 160);
  ASSERT_TRUE(second.ok()) << second.status();
  const std::vector<uint8_t> c = DecodeOnGpu(**second, all);
  EXPECT_TRUE(a == b) << "the same decoder gave different bytes";
  EXPECT_TRUE(a == c) << "a second decoder gave different bytes";

  // A hybrid batch (every third sample pixels from the CPU path) through two feeders: the
  // same tensor, and the pixel samples exactly the CPU path's bytes.
  const HostBatch hybrid = MakeBatch(TestJpegs(), 30, image::TransformSpec::Train(160), 3);
  CudaFeederStats stats;
  const at::Tensor x = FeedOnce(hybrid, &stats);
  const at::Tensor y = FeedOnce(hybrid);
  ASSERT_TRUE(x.defined() && y.defined());
  EXPECT_TRUE(at::equal(x, y)) << "two runs of one hybrid batch differ";
  EXPECT_EQ(stats.gpu_decoded, 20);
  const size_t sample_bytes = 160 * 160 * 3;
  for (int i = 0; i < 30; i += 3) {
    at::Tensor cpu = at::from_blob(const_cast<uint8_t*>(hybrid.images.data()) + sample_bytes * i,
                                   {160, 160, 3}, at::kByte)
                         .permute({2, 0, 1})
                         .to(at::kFloat);
    EXPECT_TRUE(at::equal(x[i], cpu)) << "pixel sample " << i << " was changed";
  }
}

// A JPEG whose first component names quantisation table 3, which it does not define:
// its markers pass ParseJpegFrame (so the service defers it), its decode fails.
std::vector<uint8_t> UndefinedQuantTable(std::vector<uint8_t> jpeg) {
  for (size_t p = 2; p + 12 < jpeg.size(); ++p) {
    if (jpeg[p] == 0xFF && jpeg[p + 1] == 0xC0) {
      jpeg[p + 4 + 6 + 2] = 3;
      break;
    }
  }
  return jpeg;
}

// Serves one batch from host memory, then nothing. Bad-sample reports are recorded and
// answered as the data service answers them under --bad_files=skip, or, with
// `bad_files_fail`, under --bad_files=fail.
class OneBatchSource final : public BatchSource {
 public:
  explicit OneBatchSource(const HostBatch& batch, bool bad_files_fail = false)
      : batch_(batch), bad_files_fail_(bad_files_fail) {}
  absl::StatusOr<BatchView> Acquire(absl::Duration) override {
    if (served_) return absl::DeadlineExceededError("no more batches");
    served_ = true;
    return batch_.View();
  }
  absl::Status Release(const BatchView&) override { return absl::OkStatus(); }
  absl::StatusOr<std::string> ReportBadSample(int64_t, int64_t sample_index,
                                              absl::string_view why) override {
    reports_.emplace_back(sample_index, std::string(why));
    const std::string file =
        absl::StrCat("sample ", sample_index, " (class0/", sample_index, ".jpg)");
    if (bad_files_fail_) {
      return absl::DataLossError(absl::StrCat(
          file, " (--bad_files=fail; --bad_files=skip would replace the sample): ", why));
    }
    return file;
  }
  void* memory_base() const override { return const_cast<uint8_t*>(batch_.images.data()); }
  size_t memory_bytes() const override { return batch_.images.size(); }
  // What the feeder reported: (sample index, why). Read once the feeder is gone.
  const std::vector<std::pair<int64_t, std::string>>& reports() const { return reports_; }

 private:
  const HostBatch& batch_;
  const bool bad_files_fail_;
  bool served_ = false;
  std::vector<std::pair<int64_t, std::string>> reports_;
};

at::Tensor FeedOnce(const HostBatch& batch, CudaFeederStats* stats) {
  OneBatchSource source(batch);
  absl::StatusOr<std::unique_ptr<BatchFeeder>> feeder = MakeCudaBatchFeeder(
      &source, IdentityFeederOptions(static_cast<int>(batch.kinds.size()), batch.image_size), 0,
      stats);
  EXPECT_TRUE(feeder.ok()) << feeder.status();
  if (!feeder.ok()) return at::Tensor();
  absl::StatusOr<TrainingBatch> next = (*feeder)->Next();
  EXPECT_TRUE(next.ok()) << next.status();
  if (!next.ok()) return at::Tensor();
  return next->images.cpu().contiguous();
}

TEST(GpuJpegDecoderTest, BadFileInTheGpuShareIsCountedAndReplaced) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  std::vector<std::vector<uint8_t>> jpegs = TestJpegs();
  const int bad = 2;  // sample 2 is jpegs[2]
  jpegs[bad] = UndefinedQuantTable(jpegs[bad]);
  ASSERT_TRUE(image::ParseJpegFrame(jpegs[bad]).hardware_decodable);
  // 160 pixels: every test JPEG fits a slot (a 96-pixel slot is smaller than the larger ones).
  const HostBatch batch = MakeBatch(jpegs, 6, image::TransformSpec::Train(160));
  ASSERT_EQ(batch.kinds.size(), 6u);

  absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> decoder = GpuJpegDecoder::Create(0, 6, 160);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::vector<int32_t> failed;
  DecodeOnGpu(**decoder, batch, &failed);
  EXPECT_EQ(failed, std::vector<int32_t>{bad});

  OneBatchSource source(batch);
  CudaFeederStats stats;
  {
    absl::StatusOr<std::unique_ptr<BatchFeeder>> feeder =
        MakeCudaBatchFeeder(&source, IdentityFeederOptions(6, 160), 0, &stats);
    ASSERT_TRUE(feeder.ok()) << feeder.status();
    absl::StatusOr<TrainingBatch> next = (*feeder)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_EQ(next->count, 6);
    EXPECT_EQ(next->sample_indices[bad], batch.indices[bad + 1]);
    at::Tensor labels = next->labels.cpu();
    EXPECT_EQ(labels[bad].item<int64_t>(), batch.labels[bad + 1]);
    at::Tensor images = next->images.cpu();
    EXPECT_TRUE(at::equal(images[bad], images[bad + 1])) << "the replacement's pixels";
    EXPECT_FALSE(at::equal(images[bad + 1], images[bad + 2]));
  }
  EXPECT_EQ(stats.gpu_decode_failures, 1);
  EXPECT_EQ(stats.gpu_decoded, 5);
  // Counted by the bad-data policy: reported once, by the sample's dataset index (the
  // service names its file), with nvJPEG's reason.
  ASSERT_EQ(source.reports().size(), 1u);
  EXPECT_EQ(source.reports()[0].first, batch.indices[bad]);
  EXPECT_NE(source.reports()[0].second.find("nvJPEG"), std::string::npos)
      << source.reports()[0].second;
  std::printf(
      "[ hybrid ] bad file: %lld refused, reported as sample %lld (%s) and replaced, %lld "
      "decoded on the GPU\n",
      static_cast<long long>(stats.gpu_decode_failures),
      static_cast<long long>(source.reports()[0].first), source.reports()[0].second.c_str(),
      static_cast<long long>(stats.gpu_decoded));
}

// --bad_files=fail: the policy's error (DataLoss, naming the file) ends the run from the
// GPU path as from the CPU path; the batch is not delivered.
TEST(GpuJpegDecoderTest, BadFileInTheGpuShareStopsTheRunWithBadFilesFail) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  std::vector<std::vector<uint8_t>> jpegs = TestJpegs();
  const int bad = 4;
  jpegs[bad] = UndefinedQuantTable(jpegs[bad]);
  const HostBatch batch = MakeBatch(jpegs, 6, image::TransformSpec::Train(160));
  OneBatchSource source(batch, /*bad_files_fail=*/true);
  CudaFeederStats stats;
  {
    absl::StatusOr<std::unique_ptr<BatchFeeder>> feeder =
        MakeCudaBatchFeeder(&source, IdentityFeederOptions(6, 160), 0, &stats);
    ASSERT_TRUE(feeder.ok()) << feeder.status();
    absl::StatusOr<TrainingBatch> next = (*feeder)->Next();
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss) << next.status();
    const std::string message(next.status().message());
    EXPECT_NE(message.find(absl::StrCat("class0/", batch.indices[bad], ".jpg")), std::string::npos)
        << message;
    EXPECT_NE(message.find("--bad_files=fail"), std::string::npos) << message;
    std::printf("[ hybrid ] --bad_files=fail: the run stops with %s\n",
                next.status().ToString().c_str());
  }
  EXPECT_EQ(stats.gpu_decode_failures, 1);
  ASSERT_EQ(source.reports().size(), 1u);
  EXPECT_EQ(source.reports()[0].first, batch.indices[bad]);
}

// Note [The GPU decode arena]: an arena that holds the largest test image (1024 x 768)
// but not a batch of them decodes the batch in rounds, to the same bytes.
TEST(GpuJpegDecoderTest, ABatchLargerThanTheArenaIsDecodedInRoundsToTheSameBytes) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const HostBatch batch = MakeBatch(TestJpegs(), 24, image::TransformSpec::Train(160));
  absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> whole = GpuJpegDecoder::Create(0, 24, 160);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const uint64_t small = data_service::DeferredDecodedBytes(1024, 768) + (1 << 20);
  absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> rounds =
      GpuJpegDecoder::Create(0, 24, 160, small);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  const std::vector<uint8_t> a = DecodeOnGpu(**whole, batch);
  const std::vector<uint8_t> b = DecodeOnGpu(**rounds, batch);
  EXPECT_TRUE(a == b) << "decoding in rounds changed the bytes";
  const GpuDecodeTimes times = (*rounds)->times();
  EXPECT_GT(times.batches, 1) << "the small arena should have taken several rounds";
  std::printf("[ hybrid ] arena of %.1f MiB: one batch of 24 in %lld decode rounds\n",
              small / 1048576.0, static_cast<long long>(times.batches));
}

// Note [Hardware work queues]: how long one batch's decode keeps the host while other work
// is queued on the device, on another stream: one thread spinning (the GPU's cores free) or
// matrix products (its cores busy), and while every CPU core spins. With too few hardware
// queues the decode waits for all of the other stream's work.
TEST(GpuJpegDecoderTest, DecodeTimeBesideOtherWork) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU";
  const int count = 64;
  const HostBatch batch = MakeBatch(TestJpegs(), count, image::TransformSpec::Eval(256, 224));
  absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> decoder = GpuJpegDecoder::Create(0, count, 224);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  uint8_t* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), batch.images.size()), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int khz = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), cudaSuccess);
  const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, 0);
  at::Tensor a =
      at::randn({8192, 8192}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  at::Tensor b = a.clone();
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  // The median host time of Decode() over 7 batches, `load` enqueued before each.
  auto decode_ms = [&](auto&& load) {
    std::vector<double> times;
    for (int rep = 0; rep < 7; ++rep) {
      cudaDeviceSynchronize();
      {
        c10::cuda::CUDAStreamGuard guard(other);
        load();
      }
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::vector<RefusedJpeg>> refused =
          (*decoder)->Decode(batch.View(), device, stream);
      times.push_back(ms_since(start));
      EXPECT_TRUE(refused.ok() && refused->empty());
      cudaStreamSynchronize(stream);
    }
    cudaDeviceSynchronize();
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  decode_ms([] {});  // warm-up
  const double idle = decode_ms([] {});
  const double spin = decode_ms([&] { at::cuda::sleep(static_cast<int64_t>(khz) * 100); });
  b = at::mm(a, b);
  cudaDeviceSynchronize();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) b = at::mm(a, b);
  cudaDeviceSynchronize();
  const int products = std::max(1, static_cast<int>(100.0 / (ms_since(start) / 4)));
  const double busy = decode_ms([&] {
    for (int i = 0; i < products; ++i) b = at::mm(a, b);
  });
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (unsigned i = 0; i < std::thread::hardware_concurrency(); ++i) {
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  const double cpu = decode_ms([] {});
  stop = true;
  for (std::thread& t : spinners) t.join();
  std::printf(
      "[ hybrid ] decode of %d images, host time: %.2f ms on an idle GPU; %.2f ms beside "
      "100 ms of one spinning GPU thread; %.2f ms beside 100 ms of matrix products (%d); "
      "%.2f ms with every CPU core spinning; CUDA_DEVICE_MAX_CONNECTIONS=%s\n",
      count, idle, spin, busy, products, cpu, kWorkQueues.c_str());
  EXPECT_LT(spin, idle + 50.0) << "the decode waited for another stream's work";
  EXPECT_LT(busy, idle + 50.0) << "the decode waited for all of another stream's work";
  cudaStreamDestroy(stream);
  cudaFree(device);
}

}  // namespace
}  // namespace stoker::trainer
