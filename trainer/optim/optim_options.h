// What the optimizer and the learning-rate schedule are told by the user: their option
// structs, each with the Validate() that checks it (InvalidArgument naming the flag at
// fault, `--flag=value: why`). Free of libtorch, so that the trainer's flags build quickly.
#ifndef STOKER_TRAINER_OPTIM_OPTIM_OPTIONS_H_
#define STOKER_TRAINER_OPTIM_OPTIM_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

enum class OptimizerKind { kSgd, kAdamW };

// "sgd" or "adamw": the flag's spelling, also what checkpoints record.
absl::string_view OptimizerKindName(OptimizerKind kind);
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);

// torch.optim's semantics (SGD with momentum/Nesterov, or AdamW with decoupled decay).
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double learning_rate = 0.1;  // the peak learning rate (after the warm-up)
  double weight_decay = 0.0;
  // Weight decay 0 for biases and normalisation parameters (every parameter of one
  // dimension): two parameter groups, as the usual ImageNet recipes do.
  bool no_decay_bn_bias = false;
  // SGD
  double momentum = 0.9;
  bool nesterov = false;
  // AdamW
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;

  absl::Status Validate() const;
};

enum class LrSchedule { kConstant, kCosine, kStep };

absl::string_view LrScheduleName(LrSchedule kind);
absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name);

// The learning rate at every optimizer step: a linear warm-up from base_lr/warmup_steps to
// base_lr over warmup_epochs, then constant, cosine (to lr_min at the last step) or step
// (times gamma at the start of each epoch of step_epochs). base_lr, epochs and
// steps_per_epoch are the run's (the optimizer's rate, --epochs, the data), filled in by the
// trainer; the rest comes from the user.
struct LrScheduleOptions {
  LrSchedule kind = LrSchedule::kConstant;
  double base_lr = 0.1;
  double lr_min = 0;
  int64_t steps_per_epoch = 1;
  int epochs = 1;
  double warmup_epochs = 0;
  std::vector<int> step_epochs;
  double gamma = 0.1;

  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_OPTIM_OPTIM_OPTIONS_H_
