#include "trainer/optim/optim_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_value.h"

namespace stoker::trainer {
namespace {

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

absl::string_view OptimizerKindName(OptimizerKind kind) {
  return kind == OptimizerKind::kAdamW ? "adamw" : "sgd";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  return ParseFlagChoice<OptimizerKind>(
      "optimizer", name, {{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamW}});
}

absl::Status OptimizerOptions::Validate() const {
  if (!(learning_rate > 0) || !Finite(learning_rate))
    return FlagValueError("lr", learning_rate, "must be > 0");
  if (!(momentum >= 0 && momentum < 1))
    return FlagValueError("momentum", momentum, "must be in [0, 1)");
  if (nesterov && kind != OptimizerKind::kSgd)
    return FlagValueError("nesterov", "true", "only with --optimizer=sgd");
  if (nesterov && momentum == 0) return FlagValueError("nesterov", "true", "needs --momentum > 0");
  if (!(weight_decay >= 0) || !Finite(weight_decay))
    return FlagValueError("weight_decay", weight_decay, "must be >= 0");
  if (!(beta1 >= 0 && beta1 < 1)) return FlagValueError("adam_beta1", beta1, "must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) return FlagValueError("adam_beta2", beta2, "must be in [0, 1)");
  if (!(eps > 0) || !Finite(eps)) return FlagValueError("adam_eps", eps, "must be > 0");
  return absl::OkStatus();
}

absl::string_view LrScheduleName(LrSchedule kind) {
  switch (kind) {
    case LrSchedule::kCosine:
      return "cosine";
    case LrSchedule::kStep:
      return "step";
    case LrSchedule::kConstant:
      break;
  }
  return "constant";
}

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name) {
  return ParseFlagChoice<LrSchedule>("lr_schedule", name,
                                     {{"constant", LrSchedule::kConstant},
                                      {"cosine", LrSchedule::kCosine},
                                      {"step", LrSchedule::kStep}});
}

absl::Status LrScheduleOptions::Validate() const {
  if (epochs < 1) return FlagValueError("epochs", epochs, "must be >= 1");
  if (!(base_lr > 0) || !Finite(base_lr)) return FlagValueError("lr", base_lr, "must be > 0");
  if (!(warmup_epochs >= 0) || warmup_epochs > epochs) {
    return FlagValueError("warmup_epochs", warmup_epochs,
                          absl::StrCat("must be in [0, --epochs=", epochs, "]"));
  }
  if (kind == LrSchedule::kStep && step_epochs.empty()) {
    return FlagValueError("lr_step_epochs", "",
                          "--lr_schedule=step needs the epochs at which to decay (e.g. 30,60,80)");
  }
  if (kind != LrSchedule::kStep && !step_epochs.empty()) {
    return FlagValueError("lr_step_epochs", absl::StrJoin(step_epochs, ","),
                          "only with --lr_schedule=step");
  }
  for (size_t i = 0; i < step_epochs.size(); ++i) {
    const int e = step_epochs[i];
    if (e < 1 || (i > 0 && e <= step_epochs[i - 1])) {
      return FlagValueError("lr_step_epochs", absl::StrJoin(step_epochs, ","),
                            "must be increasing epochs >= 1");
    }
  }
  if (!(gamma > 0 && gamma <= 1))
    return FlagValueError("lr_step_gamma", gamma, "must be in (0, 1]");
  if (!(lr_min >= 0 && lr_min < base_lr))
    return FlagValueError("lr_min", lr_min, "must be in [0, --lr)");
  if (lr_min > 0 && kind != LrSchedule::kCosine)
    return FlagValueError("lr_min", lr_min, "only with --lr_schedule=cosine");
  return absl::OkStatus();
}

}  // namespace stoker::trainer
