// BatchProducer with --gpu_decode_share (Note [Deferred samples] in
// data_service/image/deferred_jpeg.h): which positions are deferred, the slot layout of
// a deferred sample (header, then the file's bytes), its geometry equal to the CPU
// path's, images the hardware cannot take kept as pixels, batches identical whatever the
// thread count, and bad files on the deferred positions replaced as on the CPU path.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <turbojpeg.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/testing/status_matchers.h"
#include "data_service/batch_producer.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/dataset/encoded_image.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/image/deferred_jpeg.h"
#include "data_service/ring/ring.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kImageSize = 48;
constexpr int kBatch = 8;
constexpr uint64_t kSeed = 31;

struct Received {
  int64_t epoch, step;
  std::vector<int64_t> indices;
  std::vector<int32_t> labels;
  std::vector<uint8_t> kinds;
  int32_t deferred_count;
  std::vector<uint8_t> images;
};

std::shared_ptr<const Dataset> OpenFolder(const std::string& root) {
  auto dataset = ImageFolderDataset::Open(root);
  EXPECT_OK(dataset);
  return std::shared_ptr<const Dataset>(std::move(*dataset));
}

// A folder of baseline JPEGs of several chroma samplings, plus, in class 0, a PNG, a
// progressive and a grayscale JPEG (which stay on the CPU), and the unusable files of
// test_util::WriteBadImageFiles when asked for.
std::string MixedFolder(const std::string& name, bool with_bad_files = false) {
  const std::string root = test_util::TestDirectory(name);
  std::filesystem::remove_all(root);
  const int samplings[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420};
  for (int c = 0; c < 2; ++c) {
    const std::string dir = absl::StrCat(root, "/class", c);
    std::filesystem::create_directories(dir);
    for (int i = 0; i < 9; ++i) {
      const int width = 40 + 7 * ((i + c) % 5), height = 30 + 5 * ((i * 3 + c) % 4);
      const std::vector<uint8_t> rgb = test_util::PhotoLikeImage(width, height, c * 100 + i);
      EXPECT_OK(test_util::WriteFileBytes(
          absl::StrCat(dir, "/img", i, ".jpg"),
          test_util::EncodeJpeg(width, height, rgb, 90, samplings[i % 3], false)));
    }
  }
  const std::vector<uint8_t> rgb = test_util::PhotoLikeImage(48, 36, 5);
  EXPECT_OK(test_util::WritePng(root + "/class0/other.png", 48, 36, rgb));
  EXPECT_OK(test_util::WriteFileBytes(root + "/class0/progressive.jpg",
                                      test_util::EncodeJpeg(48, 36, rgb, 90, TJSAMP_420, true)));
  EXPECT_OK(test_util::WriteFileBytes(root + "/class0/gray.jpg",
                                      test_util::EncodeJpeg(48, 36, rgb, 90, TJSAMP_GRAY, false)));
  if (with_bad_files) {
    EXPECT_OK(test_util::WriteBadImageFiles(root + "/class0"));
  }
  return root;
}

// Options for a producer of kBatch samples of kImageSize pixels in 3 slots, on a segment
// whose name holds `use`.
BatchProducerOptions ProducerOptions(absl::string_view use) {
  static int counter = 0;
  BatchProducerOptions options;
  options.segment_name =
      absl::StrCat("/stoker.deferredtest.", test_util::UniqueId(), ".", use, ".", counter++);
  options.request.batch_size = kBatch;
  options.request.image_size = kImageSize;
  options.request.slot_count = 3;
  return options;
}

// Two epochs through a fresh producer with `share` on a pool of `threads`, for a trainer
// whose GPU decode arena is `arena_bytes`.
std::vector<Received> TwoEpochs(std::shared_ptr<const Dataset> dataset, int threads, bool train,
                                double share, BadSampleTracker* bad = nullptr,
                                uint64_t arena_bytes = kDefaultGpuDecodeArenaBytes) {
  WorkerPool pool(threads);
  BatchProducerOptions options = ProducerOptions("ring");
  options.request.train = train;
  options.request.gpu_decode_arena_bytes = arena_bytes;
  options.gpu_decode_share = share;
  options.bad_samples = bad;
  auto producer = BatchProducer::Create(options, dataset, &pool, [](const absl::Status& s) {
    ADD_FAILURE() << "unexpected error: " << s;
  });
  EXPECT_OK(producer);
  if (!producer.ok()) return {};
  auto a = (*producer)->QueueEpoch(0, kSeed);
  auto b = (*producer)->QueueEpoch(1, kSeed);
  EXPECT_TRUE(a.ok() && b.ok());
  auto segment = SharedMemorySegment::Open((*producer)->segment_name());
  EXPECT_OK(segment);
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  EXPECT_OK(consumer);
  const size_t image_bytes = size_t{kImageSize} * kImageSize * 3;
  std::vector<Received> received;
  for (int64_t n = 0; n < a->batches + b->batches; ++n) {
    auto slot = consumer->Acquire(absl::Seconds(20));
    EXPECT_OK(slot);
    if (!slot.ok()) break;
    received.push_back(
        Received{slot->epoch, slot->step,
                 std::vector<int64_t>(slot->sample_indices, slot->sample_indices + slot->count),
                 std::vector<int32_t>(slot->labels, slot->labels + slot->count),
                 std::vector<uint8_t>(slot->sample_kinds, slot->sample_kinds + slot->count),
                 slot->deferred_count,
                 std::vector<uint8_t>(slot->images, slot->images + image_bytes * slot->count)});
    EXPECT_OK(consumer->Release(slot->slot));
  }
  return received;
}

TEST(GpuDecodeShareTest, PositionsAreSpreadEvenlyAndCountExactly) {
  for (double share : {0.0, 0.1, 0.25, 0.5, 0.7, 1.0}) {
    int chosen = 0;
    for (int i = 0; i < 256; ++i) chosen += IsGpuDecodePosition(i, share) ? 1 : 0;
    EXPECT_EQ(chosen, static_cast<int>(std::floor(256 * share))) << share;
  }
  EXPECT_FALSE(IsGpuDecodePosition(0, 0.5));
  EXPECT_TRUE(IsGpuDecodePosition(1, 0.5));
  EXPECT_FALSE(IsGpuDecodePosition(2, 0.5));
  EXPECT_OK(CheckGpuDecodeShare(0.0));
  EXPECT_OK(CheckGpuDecodeShare(1.0));
  for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    absl::Status s = CheckGpuDecodeShare(bad);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--gpu_decode_share")));
  }
}

TEST(DeferredSamplesTest, SlotsCarryTheFileAndTheCpuPathsGeometry) {
  auto dataset = OpenFolder(MixedFolder("deferred_geometry"));
  const size_t image_bytes = size_t{kImageSize} * kImageSize * 3;
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "validation");
    const std::vector<Received> batches = TwoEpochs(dataset, 2, train, 0.5);
    ASSERT_EQ(batches.size(), 6u);  // 21 samples: 8, 8, 5 per epoch
    int64_t deferred = 0;
    int64_t kept = 0;
    SampleScratch scratch;
    std::vector<uint8_t> pixels(image_bytes);
    for (const Received& b : batches) {
      int32_t count = 0;
      for (size_t i = 0; i < b.indices.size(); ++i) {
        const int64_t index = b.indices[i];
        const uint8_t* place = b.images.data() + image_bytes * i;
        const SampleOptions options{kImageSize, train, kSeed, b.epoch};
        const bool name_cpu_only =
            dataset->Describe(index).find("img") == std::string::npos;  // png, progressive, gray
        if (b.kinds[i] == static_cast<uint8_t>(SampleKind::kPixels)) {
          if (IsGpuDecodePosition(static_cast<int32_t>(i), 0.5)) {
            EXPECT_TRUE(name_cpu_only) << dataset->Describe(index) << " was not deferred";
            ++kept;
          }
          ASSERT_OK(dataset->Load(index, options, scratch, pixels.data()));
          EXPECT_EQ(std::memcmp(place, pixels.data(), image_bytes), 0) << dataset->Describe(index);
          continue;
        }
        ASSERT_EQ(b.kinds[i], static_cast<uint8_t>(SampleKind::kDeferredJpeg));
        EXPECT_TRUE(IsGpuDecodePosition(static_cast<int32_t>(i), 0.5)) << "position " << i;
        EXPECT_FALSE(name_cpu_only) << dataset->Describe(index);
        ++count;
        ++deferred;
        DeferredSampleHeader header;
        std::memcpy(&header, place, sizeof(header));
        EXPECT_EQ(header.magic, kDeferredMagic);
        EXPECT_EQ(header.version, kDeferredVersion);
        auto file = dataset->ReadEncoded(index, scratch);
        ASSERT_OK(file);
        ASSERT_EQ(header.encoded_bytes, file->size());
        EXPECT_EQ(std::memcmp(place + sizeof(header), file->data(), file->size()), 0);
        // The geometry the CPU path would have applied to this (seed, epoch, index).
        auto spec = SampleTransform(options);
        ASSERT_OK(spec);
        const image::SampleKey key{kSeed, b.epoch, index};
        auto geometry = image::PlanSampleGeometry(header.width, header.height, *spec, &key);
        ASSERT_OK(geometry);
        EXPECT_EQ(image::FromDeferredAxis(header.x), geometry->x);
        EXPECT_EQ(image::FromDeferredAxis(header.y), geometry->y);
        EXPECT_EQ(header.flip != 0, geometry->flip);
        EXPECT_EQ(header.train != 0, train);
        image::TransformTrace trace;
        ASSERT_OK(
            image::DecodeAndTransform(*file, *spec, key, scratch.transform, pixels.data(), &trace));
        EXPECT_EQ(trace.header.width, header.width);
        EXPECT_EQ(trace.train.crop.left, geometry->train.crop.left);
        EXPECT_EQ(trace.train.crop.width, geometry->train.crop.width);
        EXPECT_EQ(trace.train.flip, geometry->train.flip);
      }
      EXPECT_EQ(b.deferred_count, count);
    }
    EXPECT_GT(deferred, 12);
    EXPECT_GT(kept, 0) << "the PNG, progressive and grayscale files stay on the CPU";
  }
}

TEST(DeferredSamplesTest, BatchesAreBitIdenticalWhateverTheThreadCount) {
  auto dataset = OpenFolder(MixedFolder("deferred_threads"));
  for (double share : {0.5, 1.0}) {
    for (bool train : {true, false}) {
      const std::vector<Received> one = TwoEpochs(dataset, 1, train, share);
      const std::vector<Received> three = TwoEpochs(dataset, 3, train, share);
      ASSERT_EQ(one.size(), three.size());
      for (size_t b = 0; b < one.size(); ++b) {
        EXPECT_EQ(one[b].indices, three[b].indices);
        EXPECT_EQ(one[b].kinds, three[b].kinds);
        EXPECT_TRUE(one[b].images == three[b].images) << "share " << share << " batch " << b;
      }
    }
  }
}

// Bad files at deferred positions are found on the CPU path (ParseJpegFrame sends them
// there) and replaced by the next usable sample of the epoch, as with a share of 0.
TEST(DeferredSamplesTest, BadFilesAtDeferredPositionsAreReplacedAsOnTheCpuPath) {
  auto dataset = OpenFolder(MixedFolder("deferred_bad", /*with_bad_files=*/true));
  BadSampleOptions options;
  options.max_fraction = 0.5;
  options.min_samples = 1;
  for (bool train : {true, false}) {
    BadSampleTracker cpu_bad(options, dataset->size(), nullptr);
    BadSampleTracker gpu_bad(options, dataset->size(), nullptr);
    const std::vector<Received> cpu = TwoEpochs(dataset, 2, train, 0.0, &cpu_bad);
    const std::vector<Received> gpu = TwoEpochs(dataset, 2, train, 1.0, &gpu_bad);
    ASSERT_EQ(cpu.size(), gpu.size());
    int64_t deferred = 0;
    for (size_t b = 0; b < cpu.size(); ++b) {
      EXPECT_EQ(cpu[b].indices, gpu[b].indices) << "batch " << b;
      EXPECT_EQ(cpu[b].labels, gpu[b].labels) << "batch " << b;
      EXPECT_EQ(cpu[b].deferred_count, 0);
      deferred += gpu[b].deferred_count;
    }
    EXPECT_GT(deferred, 0);
    EXPECT_EQ(cpu_bad.stats().bad_files, 5);
    EXPECT_EQ(gpu_bad.stats().bad_files, 5);
    EXPECT_EQ(gpu_bad.stats().samples_skipped, cpu_bad.stats().samples_skipped);
  }
}

// Baseline 4:2:0 JPEGs only, 2 classes of 12: every GPU decode position is deferred.
std::string BaselineFolder(const std::string& name) {
  const std::string root = test_util::TestDirectory(name);
  std::filesystem::remove_all(root);
  for (int c = 0; c < 2; ++c) {
    const std::string dir = absl::StrCat(root, "/class", c);
    std::filesystem::create_directories(dir);
    for (int i = 0; i < 12; ++i) {
      const int width = 40 + 3 * i, height = 36 + 2 * c;
      const std::vector<uint8_t> rgb = test_util::PhotoLikeImage(width, height, c * 100 + i);
      EXPECT_OK(test_util::WriteFileBytes(
          absl::StrCat(dir, "/img", i, ".jpg"),
          test_util::EncodeJpeg(width, height, rgb, 90, TJSAMP_420, false)));
    }
  }
  return root;
}

// A producer that follows its consumer's request (fixed_share nullopt) or not, with the
// consumer attached to its ring.
struct RequestRig {
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<BatchProducer> producer;
  SharedMemorySegment segment;
  std::optional<RingConsumer> consumer;

  RequestRig(std::shared_ptr<const Dataset> dataset, std::optional<double> fixed_share) {
    pool = std::make_unique<WorkerPool>(2);
    BatchProducerOptions options = ProducerOptions("request");
    options.gpu_decode_share = fixed_share;
    auto created = BatchProducer::Create(options, dataset, pool.get(), [](const absl::Status& s) {
      ADD_FAILURE() << "unexpected error: " << s;
    });
    EXPECT_OK(created);
    producer = std::move(*created);
    auto opened = SharedMemorySegment::Open(producer->segment_name());
    EXPECT_OK(opened);
    segment = std::move(*opened);
    auto attached = RingConsumer::Attach(segment.data(), segment.size());
    EXPECT_OK(attached);
    consumer.emplace(std::move(*attached));
  }

  // Queues epoch 0 and calls `check` with each of its batches before releasing it.
  void CheckEachBatchOfAnEpoch(const std::function<void(const ReadableSlot&)>& check) {
    auto epoch = producer->QueueEpoch(0, kSeed);
    ASSERT_OK(epoch);
    for (int64_t b = 0; b < epoch->batches; ++b) {
      auto slot = consumer->Acquire(absl::Seconds(20));
      ASSERT_OK(slot);
      check(*slot);
      ASSERT_OK(consumer->Release(slot->slot));
    }
  }
};

// Every sample at a GPU position of `share` is deferred, no other one is, and the slot
// says it was produced with `share`.
void ExpectBatchOfShare(const ReadableSlot& slot, double share) {
  int32_t expected = 0;
  for (int32_t i = 0; i < slot.count; ++i) {
    const bool gpu = IsGpuDecodePosition(i, share);
    expected += gpu ? 1 : 0;
    EXPECT_EQ(slot.sample_kinds[i],
              static_cast<uint8_t>(gpu ? SampleKind::kDeferredJpeg : SampleKind::kPixels))
        << "epoch " << slot.epoch << " step " << slot.step << " position " << i << " share "
        << share;
  }
  EXPECT_EQ(slot.deferred_count, expected) << "share " << share;
}

TEST(RequestedShareTest, TheProducerDefersTheShareItsConsumerRequests) {
  auto dataset = OpenFolder(BaselineFolder("request_honoured"));
  for (double share : {0.0, 0.25, 0.5, 1.0}) {
    RequestRig rig(dataset, std::nullopt);
    rig.consumer->RequestGpuDecodeShare(share);
    rig.CheckEachBatchOfAnEpoch([&](const ReadableSlot& slot) {
      EXPECT_EQ(slot.gpu_decode_share, share);
      EXPECT_EQ(slot.deferred_count, static_cast<int32_t>(std::floor(slot.count * share)));
      ExpectBatchOfShare(slot, share);
    });
  }
}

TEST(RequestedShareTest, WithoutARequestNothingIsDeferred) {
  auto dataset = OpenFolder(BaselineFolder("request_none"));
  RequestRig rig(dataset, std::nullopt);
  rig.CheckEachBatchOfAnEpoch([&](const ReadableSlot& slot) {
    EXPECT_EQ(slot.deferred_count, 0);
    EXPECT_EQ(slot.gpu_decode_share, 0.0);
  });
}

// A request changed while batches are being produced applies from a later batch on, and
// never splits one: every batch is all of one share, recorded in its slot.
TEST(RequestedShareTest, ChangesTakeEffectAtABatchBoundary) {
  auto dataset = OpenFolder(BaselineFolder("request_boundary"));
  RequestRig rig(dataset, std::nullopt);
  std::vector<int64_t> batches;
  for (int64_t e = 0; e < 6; ++e) {
    auto epoch = rig.producer->QueueEpoch(e, kSeed);
    ASSERT_OK(epoch);
    batches.push_back(epoch->batches);
  }
  const double shares[] = {0.25, 0.75};
  std::vector<double> seen;
  int requests = 0;
  for (int64_t e = 0; e < 6; ++e) {
    for (int64_t b = 0; b < batches[e]; ++b) {
      // Change the request while the producer has batches in flight.
      rig.consumer->RequestGpuDecodeShare(shares[requests++ % 2]);
      auto slot = rig.consumer->Acquire(absl::Seconds(20));
      ASSERT_OK(slot);
      EXPECT_TRUE(slot->gpu_decode_share == 0.0 || slot->gpu_decode_share == 0.25 ||
                  slot->gpu_decode_share == 0.75)
          << slot->gpu_decode_share;
      ExpectBatchOfShare(*slot, slot->gpu_decode_share);
      seen.push_back(slot->gpu_decode_share);
      ASSERT_OK(rig.consumer->Release(slot->slot));
    }
  }
  // Once the requests alternate, both shares appear; the first batches may precede them.
  EXPECT_NE(std::find(seen.begin(), seen.end(), 0.25), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), 0.75), seen.end());
  // A steady request holds from the next batch the producer starts on.
  rig.consumer->RequestGpuDecodeShare(0.5);
  auto epoch = rig.producer->QueueEpoch(6, kSeed);
  ASSERT_OK(epoch);
  int64_t at_half = 0;
  for (int64_t b = 0; b < epoch->batches; ++b) {
    auto slot = rig.consumer->Acquire(absl::Seconds(20));
    ASSERT_OK(slot);
    ExpectBatchOfShare(*slot, slot->gpu_decode_share);
    at_half += slot->gpu_decode_share == 0.5 ? 1 : 0;
    ASSERT_OK(rig.consumer->Release(slot->slot));
  }
  EXPECT_EQ(at_half, epoch->batches) << "the epoch was queued after the request";
}

TEST(RequestedShareTest, AFixedShareIgnoresTheRequest) {
  auto dataset = OpenFolder(BaselineFolder("request_fixed"));
  RequestRig rig(dataset, 0.5);
  rig.consumer->RequestGpuDecodeShare(0.0);
  rig.CheckEachBatchOfAnEpoch([&](const ReadableSlot& slot) {
    EXPECT_EQ(slot.gpu_decode_share, 0.5);
    ExpectBatchOfShare(slot, 0.5);
  });
}

// Note [The GPU decode arena]: BaselineFolder's images have rows of 256 bytes decoded, 36
// of them in class 0 and 38 in class 1; an arena of 9500 bytes takes the first only.
TEST(DeferredSamplesTest, ImagesLargerThanTheTrainersArenaStayOnTheCpu) {
  auto dataset = OpenFolder(BaselineFolder("arena_bound"));
  ASSERT_EQ(DeferredDecodedBytes(73, 36), 9216u);
  ASSERT_EQ(DeferredDecodedBytes(40, 38), 9728u);
  const std::vector<Received> batches = TwoEpochs(dataset, 2, true, 1.0, nullptr, 9500);
  ASSERT_FALSE(batches.empty());
  int64_t deferred = 0;
  for (const Received& b : batches) {
    for (size_t i = 0; i < b.kinds.size(); ++i) {
      const bool is_deferred = b.kinds[i] == static_cast<uint8_t>(SampleKind::kDeferredJpeg);
      EXPECT_EQ(is_deferred, b.labels[i] == 0) << dataset->Describe(b.indices[i]);
      deferred += is_deferred ? 1 : 0;
    }
  }
  EXPECT_EQ(deferred, 24);  // class 0's 12 images, in each of the two epochs
}

// A producer over BaselineFolder (24 samples) whose first epoch has been produced and
// consumed, so that its 24 samples are counted as seen.
struct ConsumedEpochRig {
  std::shared_ptr<const Dataset> dataset;
  std::unique_ptr<BadSampleTracker> bad;
  std::unique_ptr<WorkerPool> pool = std::make_unique<WorkerPool>(2);
  std::unique_ptr<BatchProducer> producer;

  ConsumedEpochRig(const std::string& name, const BadSampleOptions& options)
      : dataset(OpenFolder(BaselineFolder(name))),
        bad(std::make_unique<BadSampleTracker>(options, dataset->size(), nullptr)) {
    BatchProducerOptions producer_options = ProducerOptions(name);
    producer_options.gpu_decode_share = 1.0;
    producer_options.bad_samples = bad.get();
    auto created = BatchProducer::Create(
        producer_options, dataset, pool.get(),
        [](const absl::Status& s) { ADD_FAILURE() << "unexpected production error: " << s; });
    EXPECT_OK(created);
    producer = std::move(*created);
    auto epoch = producer->QueueEpoch(0, kSeed);
    EXPECT_OK(epoch);
    auto segment = SharedMemorySegment::Open(producer->segment_name());
    EXPECT_OK(segment);
    auto consumer = RingConsumer::Attach(segment->data(), segment->size());
    EXPECT_OK(consumer);
    for (int64_t b = 0; b < epoch->batches; ++b) {
      auto slot = consumer->Acquire(absl::Seconds(20));
      EXPECT_OK(slot);
      if (!slot.ok()) break;
      EXPECT_OK(consumer->Release(slot->slot));
    }
  }
};

int Occurrences(const std::string& text, const std::string& word) {
  int count = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++count;
  return count;
}

// Note [GPU decode failures]: under --bad_files=skip, counted as the CPU path counts a bad
// file (one bad file, a skipped sample each time), and named once in the log.
TEST(GpuDecodeFailureTest, UnderSkipIsCountedAndNamedOnce) {
  BadSampleOptions options;
  options.max_fraction = 0.5;
  options.min_samples = 1;
  ConsumedEpochRig rig("gpu_failure_skip", options);
  const std::string file = rig.dataset->Describe(5);
  ASSERT_THAT(file, HasSubstr(".jpg"));
  ::testing::internal::CaptureStderr();
  auto first = rig.producer->ReportGpuDecodeFailure(0, 5, "nvJPEG: bad JPEG");
  auto again = rig.producer->ReportGpuDecodeFailure(1, 5, "nvJPEG: bad JPEG");
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_OK(first);
  ASSERT_OK(again);
  EXPECT_EQ(*first, file);
  const BadSampleStats stats = rig.bad->stats();
  EXPECT_EQ(stats.samples_seen, 24);
  EXPECT_EQ(stats.bad_files, 1);
  EXPECT_EQ(stats.samples_skipped, 2);
  EXPECT_EQ(Occurrences(log, file), 1) << log;
  EXPECT_THAT(log, HasSubstr("nvJPEG: bad JPEG"));
  EXPECT_OK(rig.producer->QueueEpoch(1, kSeed));
}

TEST(GpuDecodeFailureTest, UnderFailStopsTheRunNamingTheFile) {
  BadSampleOptions options;
  options.policy = BadFilePolicy::kFail;
  ConsumedEpochRig rig("gpu_failure_fail", options);
  const std::string file = rig.dataset->Describe(7);
  EXPECT_THAT(
      rig.producer->ReportGpuDecodeFailure(0, 7, "nvJPEG: bad JPEG"),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(file), HasSubstr("--bad_files=fail"),
                                                  HasSubstr("nvJPEG: bad JPEG"))));
  EXPECT_EQ(rig.bad->stats().bad_files, 1);
  EXPECT_THAT(rig.producer->QueueEpoch(1, kSeed), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(GpuDecodeFailureTest, CountsTowardTheMaxBadFraction) {
  BadSampleOptions options;
  options.max_fraction = 0.05;  // of 24 samples seen: 1.2 may be replaced
  options.min_samples = 1;
  ConsumedEpochRig rig("gpu_failure_fraction", options);
  EXPECT_OK(rig.producer->ReportGpuDecodeFailure(0, 1, "nvJPEG: bad JPEG"));
  EXPECT_THAT(rig.producer->ReportGpuDecodeFailure(0, 2, "nvJPEG: bad JPEG"),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("--max_bad_fraction"),
                                                          HasSubstr(rig.dataset->Describe(2)))));
}

TEST(GpuDecodeFailureTest, AnIndexOutsideTheDatasetIsRefused) {
  BadSampleOptions options;
  ConsumedEpochRig rig("gpu_failure_index", options);
  EXPECT_THAT(rig.producer->ReportGpuDecodeFailure(0, -1, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rig.producer->ReportGpuDecodeFailure(0, rig.dataset->size(), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(rig.bad->stats().bad_files, 0);
}

}  // namespace
}  // namespace stoker::data_service
