#include "trainer/input/batch_feeder.h"

#include <ATen/ATen.h>

#include "common/status_macros.h"
#include "common/torch_status.h"

namespace stoker::trainer {
namespace {

class CpuBatchFeeder final : public BatchFeeder {
 public:
  CpuBatchFeeder(BatchSource* source, const FeederOptions& options)
      : source_(source), options_(options) {
    mean_ = at::tensor({options.mean[0], options.mean[1], options.mean[2]}) * 255.0;
    inv_std_ =
        1.0 / (at::tensor({options.stddev[0], options.stddev[1], options.stddev[2]}) * 255.0);
  }

  absl::StatusOr<TrainingBatch> Next() override {
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(data_service::BatchView view, source_->Acquire(options_.timeout));
    if (view.deferred_count > 0) {
      (void)source_->Release(view);
      return absl::FailedPreconditionError(
          "the ring holds deferred samples (the data service's --gpu_decode_share is above 0), "
          "which only a CUDA trainer decodes; run the data service with --gpu_decode_share=auto "
          "(the default: it follows the trainer, which asks for 0 on the CPU) or 0");
    }
    TrainingBatch batch = BatchOfSlot(view);
    batch.data_wait = absl::Now() - start;
    RETURN_IF_ERROR(TorchCall("CPU feeder: normalising a batch", [&] {
      const int64_t s = options_.image_size;
      at::Tensor raw = at::from_blob(const_cast<uint8_t*>(view.images), {view.count, s, s, 3},
                                     at::TensorOptions().dtype(at::kByte));
      // NHWC in memory is channels_last for the [N, 3, H, W] view: no transpose copy.
      batch.images =
          raw.to(at::kFloat).sub_(mean_).mul_(inv_std_).permute({0, 3, 1, 2}).to(options_.dtype);
      batch.labels = at::from_blob(const_cast<int32_t*>(view.labels), {view.count},
                                   at::TensorOptions().dtype(at::kInt))
                         .to(at::kLong);
    }));
    // Both tensors are copies now: the slot can go back.
    RETURN_IF_ERROR(source_->Release(view));
    return batch;
  }

 private:
  BatchSource* source_;
  FeederOptions options_;
  at::Tensor mean_;
  at::Tensor inv_std_;
};

}  // namespace

TrainingBatch BatchOfSlot(const data_service::BatchView& view) {
  TrainingBatch batch;
  batch.epoch = view.epoch;
  batch.step = view.step;
  batch.count = view.count;
  batch.gpu_decode_share = view.gpu_decode_share;
  if (view.sample_indices != nullptr) {
    batch.sample_indices.assign(view.sample_indices, view.sample_indices + view.count);
  }
  return batch;
}

std::unique_ptr<BatchFeeder> MakeCpuBatchFeeder(BatchSource* source, const FeederOptions& options) {
  return std::make_unique<CpuBatchFeeder>(source, options);
}

}  // namespace stoker::trainer
