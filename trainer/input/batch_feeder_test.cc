// The CPU batch feeder: it passes the feeder conformance suite, normalises a ring batch on
// the host and gives its slot back before Next() returns, and refuses batches with deferred
// samples (which only the CUDA feeder decodes), naming the flag.
#include "trainer/input/batch_feeder.h"

#include <ATen/ATen.h>

#include <memory>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/input/fake_batch_source.h"
#include "trainer/input/feeder_conformance.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

class CpuTarget final : public FeederConformanceTarget {
 public:
  absl::StatusOr<std::unique_ptr<BatchFeeder>> Make(BatchSource* source,
                                                    const FeederOptions& options) override {
    return MakeCpuBatchFeeder(source, options);
  }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  bool decodes_deferred_samples() const override { return false; }
  bool measures_gpu_input_wait() const override { return false; }
};

INSTANTIATE_TEST_SUITE_P(Cpu, FeederConformanceTest,
                         (::stoker::testing::OnlyTarget<FeederConformanceTarget, CpuTarget>("cpu")),
                         FeederConformanceParamName);

// One batch of `count` 2x2 images.
FakeBatchSourceOptions OneBatch(int count) {
  FakeBatchSourceOptions options;
  options.batch_size = count;
  options.image_size = 2;
  options.batches = 1;
  return options;
}

FeederOptions Options() {
  FeederOptions options;
  options.batch_size = 4;
  options.image_size = 2;
  return options;
}

TEST(CpuBatchFeederTest, NormalisesPixelBatchesAndReleasesTheSlotBeforeReturning) {
  FakeBatchSource source(OneBatch(4));
  std::unique_ptr<BatchFeeder> feeder = MakeCpuBatchFeeder(&source, Options());
  ASSERT_OK_AND_ASSIGN(const TrainingBatch batch, feeder->Next());
  EXPECT_EQ(batch.count, 4);
  EXPECT_EQ(source.released(), 1);
}

TEST(CpuBatchFeederTest, RefusesDeferredSamplesNamingTheFlag) {
  FakeBatchSourceOptions options = OneBatch(4);
  options.deferred_sample = 1;
  FakeBatchSource source(options);
  std::unique_ptr<BatchFeeder> feeder = MakeCpuBatchFeeder(&source, Options());
  EXPECT_THAT(feeder->Next(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--gpu_decode_share")));
  EXPECT_EQ(source.released(), 1) << "the slot goes back";
}

}  // namespace
}  // namespace stoker::trainer
