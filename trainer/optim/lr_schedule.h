// LearningRateSchedule: the learning rate at each optimizer step, as a pure function of the
// step, so that a resumed run continues the schedule exactly: a linear warm-up, then
// constant, cosine annealing or step decay.
#ifndef STOKER_TRAINER_OPTIM_LR_SCHEDULE_H_
#define STOKER_TRAINER_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/optim/optim_options.h"

namespace stoker::trainer {

// Immutable; thread-safe.
//
//   ASSIGN_OR_RETURN(auto schedule, LearningRateSchedule::Create(options));
//   optimizer.set_learning_rate(schedule.At(global_step));  // before each optimizer step
class LearningRateSchedule {
 public:
  // InvalidArgument for steps_per_epoch < 1, epochs < 1, base_lr <= 0 or a warm-up
  // longer than the run.
  static absl::StatusOr<LearningRateSchedule> Create(const LrScheduleOptions& options);

  // The learning rate of optimizer step `step` (0-based): during the warm-up
  // base * (step + 1) / warmup_steps; then base (constant);
  // lr_min + (base - lr_min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
  // (cosine); base * gamma^(number of step_epochs <= step / steps_per_epoch) (step, whose
  // decays also apply during the warm-up). Steps past the end keep the last value.
  double At(int64_t step) const;

  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t total_steps() const { return total_steps_; }

 private:
  explicit LearningRateSchedule(const LrScheduleOptions& options);

  LrScheduleOptions options_;
  int64_t warmup_steps_ = 0;
  int64_t total_steps_ = 0;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_OPTIM_LR_SCHEDULE_H_
