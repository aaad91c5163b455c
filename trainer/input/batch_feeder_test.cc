// The CPU batch feeder: it normalises a ring batch on the host, and refuses batches with
// deferred samples (which only the CUDA feeder decodes), naming the flag.
#include "trainer/input/batch_feeder.h"

#include <ATen/ATen.h>

#include <vector>

#include "data_service/ring/wire_types.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

// One batch of `count` 2x2 images from host memory; sample 1 may be marked deferred.
class OneBatch final : public BatchSource {
 public:
  OneBatch(int count, bool deferred)
      : images_(count * 2 * 2 * 3, 51), labels_(count, 3), kinds_(count, 0), deferred_(deferred) {
    if (deferred_) kinds_[1] = static_cast<uint8_t>(data_service::SampleKind::kDeferredJpeg);
  }
  absl::StatusOr<data_service::BatchView> Acquire(absl::Duration) override {
    data_service::BatchView view;
    view.slot = 0;
    view.count = static_cast<int32_t>(labels_.size());
    view.images = images_.data();
    view.labels = labels_.data();
    view.sample_kinds = kinds_.data();
    view.deferred_count = deferred_ ? 1 : 0;
    return view;
  }
  absl::Status Release(const data_service::BatchView&) override {
    ++released_;
    return absl::OkStatus();
  }
  void* memory_base() const override { return const_cast<uint8_t*>(images_.data()); }
  size_t memory_bytes() const override { return images_.size(); }
  int released() const { return released_; }

 private:
  std::vector<uint8_t> images_;
  std::vector<int32_t> labels_;
  std::vector<uint8_t> kinds_;
  bool deferred_;
  int released_ = 0;
};

FeederOptions Options() {
  FeederOptions options;
  options.batch_size = 4;
  options.image_size = 2;
  return options;
}

TEST(CpuBatchFeederTest, NormalisesPixelBatches) {
  OneBatch source(4, /*deferred=*/false);
  std::unique_ptr<BatchFeeder> feeder = MakeCpuBatchFeeder(&source, Options());
  absl::StatusOr<TrainingBatch> batch = feeder->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->count, 4);
  EXPECT_EQ(source.released(), 1);
}

TEST(CpuBatchFeederTest, RefusesDeferredSamplesNamingTheFlag) {
  OneBatch source(4, /*deferred=*/true);
  std::unique_ptr<BatchFeeder> feeder = MakeCpuBatchFeeder(&source, Options());
  absl::StatusOr<TrainingBatch> batch = feeder->Next();
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(batch.status().message().find("--gpu_decode_share"), absl::string_view::npos);
  EXPECT_EQ(source.released(), 1) << "the slot goes back";
}

}  // namespace
}  // namespace stoker::trainer
