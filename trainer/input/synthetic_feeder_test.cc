// The synthetic feeder keeps the BatchFeeder contract that needs no ring: batches numbered
// (epoch, step) in order from the first batch of the run, images [batch, 3, S, S] in
// channels_last layout and the requested type on the device, int64 labels in range.
#include "trainer/input/synthetic_feeder.h"

#include <ATen/ATen.h>

#include <cstdint>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

FeederOptions Options(at::ScalarType dtype) {
  FeederOptions options;
  options.batch_size = 6;
  options.image_size = 8;
  options.dtype = dtype;
  return options;
}

TEST(SyntheticBatchFeederTest, NumbersBatchesInOrderAcrossEpochsFromTheFirstBatch) {
  SyntheticBatchFeeder feeder(Options(at::kFloat), /*num_classes=*/5, at::Device(at::kCPU),
                              /*steps_per_epoch=*/4, /*first_batch=*/6);
  for (int64_t number = 6; number < 14; ++number) {
    ASSERT_OK_AND_ASSIGN(const TrainingBatch batch, feeder.Next());
    EXPECT_EQ(batch.epoch, number / 4);
    EXPECT_EQ(batch.step, number % 4);
    EXPECT_EQ(batch.count, 6);
  }
}

TEST(SyntheticBatchFeederTest, BatchesHaveTheShapeLayoutTypeAndLabelsOfTheOptions) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SyntheticBatchFeeder feeder(Options(dtype), /*num_classes=*/5, at::Device(at::kCPU), 4, 0);
    ASSERT_OK_AND_ASSIGN(const TrainingBatch batch, feeder.Next());
    EXPECT_EQ(batch.images.sizes(), at::IntArrayRef({6, 3, 8, 8}));
    EXPECT_EQ(batch.images.scalar_type(), dtype);
    EXPECT_TRUE(batch.images.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_EQ(batch.images.device(), at::Device(at::kCPU));
    EXPECT_EQ(batch.labels.scalar_type(), at::kLong);
    ASSERT_EQ(batch.labels.numel(), 6);
    EXPECT_GE(batch.labels.min().item<int64_t>(), 0);
    EXPECT_LT(batch.labels.max().item<int64_t>(), 5);
    EXPECT_TRUE(batch.sample_indices.empty());
    EXPECT_EQ(batch.gpu_decode_share, 0.0);
    EXPECT_FALSE(batch.gpu_input_wait.has_value());
  }
}

}  // namespace
}  // namespace stoker::trainer
