// SyntheticBatchFeeder: the GPU-bound ceiling of a benchmark. One batch made on the device
// is handed out again and again, numbered as the data service would number its batches.
#ifndef STOKER_TRAINER_INPUT_SYNTHETIC_FEEDER_H_
#define STOKER_TRAINER_INPUT_SYNTHETIC_FEEDER_H_

#include <cstdint>
#include <memory>

#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

// Owned by the training thread.
class SyntheticBatchFeeder final : public BatchFeeder {
 public:
  // Random images (normal, channels_last, `dtype`) and labels in [0, num_classes) on
  // `device`; the first batch handed out is batch `first_batch` of the run.
  SyntheticBatchFeeder(const FeederOptions& options, int num_classes, at::Device device,
                       int64_t steps_per_epoch, int64_t first_batch);

  absl::StatusOr<TrainingBatch> Next() override;

 private:
  TrainingBatch batch_;
  int64_t steps_per_epoch_;
  int64_t next_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_SYNTHETIC_FEEDER_H_
