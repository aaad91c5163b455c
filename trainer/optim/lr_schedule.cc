#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<LearningRateSchedule> LearningRateSchedule::Create(
    const LrScheduleOptions& options) {
  if (options.steps_per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning-rate schedule: an epoch has ", options.steps_per_epoch,
                     " optimizer steps (too few batches for --batch_size and --accumulate?)"));
  }
  if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  return LearningRateSchedule(options);
}

LearningRateSchedule::LearningRateSchedule(const LrScheduleOptions& options) : options_(options) {
  total_steps_ = options.steps_per_epoch * options.epochs;
  warmup_steps_ = std::llround(options.warmup_epochs * options.steps_per_epoch);
  warmup_steps_ = std::min(warmup_steps_, total_steps_);
}

double LearningRateSchedule::At(int64_t step) const {
  step = std::clamp<int64_t>(step, 0, total_steps_ - 1);
  const double base = options_.base_lr;
  const double warm = step < warmup_steps_ ? static_cast<double>(step + 1) / warmup_steps_ : 1.0;
  switch (options_.kind) {
    case LrSchedule::kConstant:
      return base * warm;
    case LrSchedule::kStep: {
      const int64_t epoch = step / options_.steps_per_epoch;
      double factor = 1.0;
      for (int milestone : options_.step_epochs) {
        if (milestone <= epoch) factor *= options_.gamma;
      }
      return base * warm * factor;
    }
    case LrSchedule::kCosine: {
      if (step < warmup_steps_) return base * warm;
      const int64_t span = std::max<int64_t>(1, total_steps_ - warmup_steps_);
      const double progress = static_cast<double>(step - warmup_steps_) / span;
      return options_.lr_min + (base - options_.lr_min) * 0.5 * (1.0 + std::cos(M_PI * progress));
    }
  }
  return base;
}

}  // namespace stoker::trainer
