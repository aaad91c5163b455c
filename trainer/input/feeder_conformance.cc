#include "trainer/input/feeder_conformance.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "trainer/input/fake_batch_source.h"

namespace stoker::trainer {

namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

// IdentityFeederOptions for the batches of `source`.
FeederOptions IdentityOptions(const FakeBatchSourceOptions& source) {
  return IdentityFeederOptions(source.batch_size, source.image_size);
}

// A source of `batches` batches in epochs of `batches_per_epoch`.
FakeBatchSourceOptions Epochs(int64_t batches, int64_t batches_per_epoch) {
  FakeBatchSourceOptions options;
  options.batches = batches;
  options.batches_per_epoch = batches_per_epoch;
  return options;
}

// Batch `number`'s images as the source holds them: uint8 [count, H, W, 3].
at::Tensor SourceBytes(const FakeBatchSource& source, int64_t number) {
  const int s = source.options().image_size;
  at::Tensor bytes = at::empty({source.CountOf(number), s, s, 3}, at::kByte);
  uint8_t* data = bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < bytes.numel(); ++i) data[i] = FakeBatchSource::Byte(number, i);
  return bytes;
}

// Checks every field of `batch` against batch `number` of `source`, its images against the
// source's bytes normalised by identity options.
void ExpectBatch(const FeederConformanceTarget& target, const FakeBatchSource& source,
                 int64_t number, const TrainingBatch& batch) {
  const FakeBatchSourceOptions& options = source.options();
  const int count = source.CountOf(number);
  EXPECT_EQ(batch.epoch, number / options.batches_per_epoch) << "batch " << number;
  EXPECT_EQ(batch.step, number % options.batches_per_epoch) << "batch " << number;
  ASSERT_EQ(batch.count, count) << "batch " << number;
  ASSERT_TRUE(batch.images.defined());
  EXPECT_EQ(batch.images.device(), target.device());
  EXPECT_EQ(batch.images.sizes(),
            at::IntArrayRef({count, 3, options.image_size, options.image_size}));
  EXPECT_TRUE(batch.images.is_contiguous(at::MemoryFormat::ChannelsLast));
  // channels_last [N, 3, H, W] is NHWC in memory: permute back and compare the bytes.
  const at::Tensor got = batch.images.permute({0, 2, 3, 1}).to(at::kFloat).cpu().contiguous();
  const at::Tensor want = SourceBytes(source, number).to(at::kFloat);
  const int64_t wrong = (got - want).abs().gt(0.01).sum().item<int64_t>();
  EXPECT_EQ(wrong, 0) << "batch " << number << " holds " << wrong
                      << " values that differ from its slot's bytes (a slot released before its "
                         "copy completed is poisoned)";
  ASSERT_TRUE(batch.labels.defined());
  EXPECT_EQ(batch.labels.scalar_type(), at::kLong);
  EXPECT_EQ(batch.labels.device(), target.device());
  const at::Tensor labels = batch.labels.cpu();
  ASSERT_EQ(labels.numel(), count);
  ASSERT_EQ(batch.sample_indices.size(), static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(labels[i].item<int64_t>(), FakeBatchSource::Label(number, i));
    EXPECT_EQ(batch.sample_indices[i], FakeBatchSource::SampleIndex(number, i));
  }
  EXPECT_GE(batch.data_wait, absl::ZeroDuration());
  EXPECT_EQ(batch.gpu_input_wait.has_value(), target.measures_gpu_input_wait());
  EXPECT_EQ(batch.gpu_decode_share, options.gpu_decode_share);
}

// Feeds every batch of `source` through a feeder with identity options and checks each one
// (ExpectBatch).
void FeedEveryBatch(FeederConformanceTarget& target, FakeBatchSource& source) {
  const FakeBatchSourceOptions& options = source.options();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BatchFeeder> feeder,
                       target.Make(&source, IdentityOptions(options)));
  for (int64_t number = 0; number < options.batches; ++number) {
    ASSERT_OK_AND_ASSIGN(const TrainingBatch batch, feeder->Next());
    ExpectBatch(target, source, number, batch);
  }
}

// FeedEveryBatch from a fresh source with `options`.
void FeedEveryBatch(FeederConformanceTarget& target, const FakeBatchSourceOptions& options) {
  FakeBatchSource source(options);
  FeedEveryBatch(target, source);
}

TEST_P(FeederConformanceTest, HandsOutEveryBatchInOrderAcrossEpochs) {
  FakeBatchSourceOptions options = Epochs(/*batches=*/7, /*batches_per_epoch=*/3);
  options.gpu_decode_share = 0.25;
  FeedEveryBatch(target(), options);
}

// Note [Slot release after copy] in cuda_batch_feeder.cc: with two slots poisoned on release, a
// feeder that gave a slot back before its copy completed would hand out poison, and one that never
// gave it back would stall.
TEST_P(FeederConformanceTest, ASlotGoesBackOnlyAfterItsBytesWereCopiedAndAlwaysGoesBack) {
  const FakeBatchSourceOptions options{/*slots=*/2, /*batch_size=*/16, /*image_size=*/32,
                                       /*batches=*/12};
  FakeBatchSource source(options);
  FeedEveryBatch(target(), source);
  EXPECT_EQ(source.acquired(), options.batches);
  EXPECT_GE(source.released(), options.batches - options.slots);
}

TEST_P(FeederConformanceTest, APartialLastBatchOfAnEpochKeepsItsCount) {
  FakeBatchSourceOptions options = Epochs(/*batches=*/4, /*batches_per_epoch=*/2);
  options.last_batch_count = 3;
  FeedEveryBatch(target(), options);
}

TEST_P(FeederConformanceTest, NormalisesWithTheMeanAndStddevIntoTheRequestedType) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    FakeBatchSourceOptions source_options;
    source_options.batches = 1;
    FakeBatchSource source(source_options);
    FeederOptions options = IdentityOptions(source_options);
    options.dtype = dtype;
    const float mean[3] = {0.485f, 0.456f, 0.406f};
    const float stddev[3] = {0.229f, 0.224f, 0.225f};
    for (int c = 0; c < 3; ++c) {
      options.mean[c] = mean[c];
      options.stddev[c] = stddev[c];
    }
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<BatchFeeder> feeder, target().Make(&source, options));
    ASSERT_OK_AND_ASSIGN(const TrainingBatch batch, feeder->Next());
    EXPECT_EQ(batch.images.scalar_type(), dtype);
    EXPECT_TRUE(batch.images.is_contiguous(at::MemoryFormat::ChannelsLast));
    const at::Tensor expected = SourceBytes(source, 0)
                                    .to(at::kFloat)
                                    .div(255)
                                    .sub(at::tensor({mean[0], mean[1], mean[2]}))
                                    .div(at::tensor({stddev[0], stddev[1], stddev[2]}))
                                    .permute({0, 3, 1, 2});
    const at::Tensor got = batch.images.to(at::kFloat).cpu();
    // bf16 keeps 8 bits of mantissa: |x| <= 2.7 rounds by less than 0.02.
    const float tolerance = dtype == at::kFloat ? 1e-4f : 0.02f;
    EXPECT_LT((got - expected).abs().max().item<float>(), tolerance) << at::toString(dtype);
  }
}

TEST_P(FeederConformanceTest, WhenNoBatchArrivesNextSaysDeadlineExceeded) {
  FakeBatchSourceOptions options;
  options.batches = 2;
  FakeBatchSource source(options);
  FeederOptions feeder_options = IdentityOptions(options);
  feeder_options.timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BatchFeeder> feeder, target().Make(&source, feeder_options));
  ASSERT_OK(feeder->Next());
  ASSERT_OK(feeder->Next());
  EXPECT_THAT(feeder->Next(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_P(FeederConformanceTest, TheSourcesErrorComesBackFromNext) {
  FakeBatchSourceOptions options;
  options.batches = 4;
  FakeBatchSource source(options);
  source.FailAcquireOf(1, absl::UnavailableError("the data service died"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BatchFeeder> feeder,
                       target().Make(&source, IdentityOptions(options)));
  ASSERT_OK_AND_ASSIGN(const TrainingBatch first, feeder->Next());
  ExpectBatch(target(), source, 0, first);
  EXPECT_THAT(feeder->Next(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the data service died")));
}

TEST_P(FeederConformanceTest, AFeederThatCannotDecodeDeferredSamplesRefusesThemNamingTheFlag) {
  if (target().decodes_deferred_samples()) GTEST_SKIP() << "this feeder decodes deferred samples";
  FakeBatchSourceOptions options;
  options.batches = 1;
  options.deferred_sample = 1;
  FakeBatchSource source(options);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BatchFeeder> feeder,
                       target().Make(&source, IdentityOptions(options)));
  EXPECT_THAT(feeder->Next(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--gpu_decode_share")));
  EXPECT_EQ(source.released(), 1) << "the slot goes back";
}

}  // namespace
}  // namespace stoker::trainer
