#include "trainer/input/synthetic_feeder.h"

#include <ATen/ATen.h>

namespace stoker::trainer {

SyntheticBatchFeeder::SyntheticBatchFeeder(const FeederOptions& options, int num_classes,
                                           at::Device device, int64_t steps_per_epoch,
                                           int64_t first_batch)
    : steps_per_epoch_(steps_per_epoch), next_(first_batch) {
  const int64_t s = options.image_size;
  batch_.images = at::randn({options.batch_size, 3, s, s},
                            at::TensorOptions().device(device).dtype(options.dtype))
                      .contiguous(at::MemoryFormat::ChannelsLast);
  batch_.labels = at::randint(0, num_classes, {options.batch_size},
                              at::TensorOptions().device(device).dtype(at::kLong));
  batch_.count = options.batch_size;
}

absl::StatusOr<TrainingBatch> SyntheticBatchFeeder::Next() {
  TrainingBatch batch = batch_;
  batch.epoch = next_ / steps_per_epoch_;
  batch.step = next_ % steps_per_epoch_;
  ++next_;
  return batch;
}

}  // namespace stoker::trainer
