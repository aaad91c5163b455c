#include "trainer/options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {
namespace {

template <typename T>
absl::Status Bad(absl::string_view flag, const T& value, absl::string_view need) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", need));
}

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

absl::Status ValidateOptions(const TrainerOptions& o) {
  if (o.data_socket.empty() && o.synthetic_steps == 0) {
    return absl::InvalidArgumentError(
        "--data_socket is required (the launcher passes it), unless --synthetic_steps is set");
  }
  if (o.batch_size < 1) return Bad("batch_size", o.batch_size, "must be >= 1");
  if (o.image_size < 8) return Bad("image_size", o.image_size, "must be >= 8");
  if (o.epochs < 1) return Bad("epochs", o.epochs, "must be >= 1");
  if (o.num_classes < 1) return Bad("num_classes", o.num_classes, "must be >= 1");
  if (o.bucket_bytes < 1024) return Bad("bucket_mb", o.bucket_bytes >> 20, "must be >= 1");
  if (o.ring_slots < 3) return Bad("ring_slots", o.ring_slots, "must be >= 3");
  if (o.data_timeout <= absl::ZeroDuration()) {
    return Bad("data_timeout_s", absl::ToInt64Seconds(o.data_timeout), "must be >= 1");
  }

  if (o.optimizer != "sgd" && o.optimizer != "adamw") {
    return Bad("optimizer", o.optimizer, "use sgd or adamw");
  }
  if (!(o.learning_rate > 0) || !Finite(o.learning_rate)) {
    return Bad("lr", o.learning_rate, "must be > 0");
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) return Bad("momentum", o.momentum, "must be in [0, 1)");
  if (o.nesterov && o.optimizer != "sgd") return Bad("nesterov", "true", "only with --optimizer=sgd");
  if (o.nesterov && o.momentum == 0) return Bad("nesterov", "true", "needs --momentum > 0");
  if (!(o.weight_decay >= 0) || !Finite(o.weight_decay)) {
    return Bad("weight_decay", o.weight_decay, "must be >= 0");
  }
  if (!(o.adam_beta1 >= 0 && o.adam_beta1 < 1)) {
    return Bad("adam_beta1", o.adam_beta1, "must be in [0, 1)");
  }
  if (!(o.adam_beta2 >= 0 && o.adam_beta2 < 1)) {
    return Bad("adam_beta2", o.adam_beta2, "must be in [0, 1)");
  }
  if (!(o.adam_eps > 0) || !Finite(o.adam_eps)) return Bad("adam_eps", o.adam_eps, "must be > 0");

  if (!(o.warmup_epochs >= 0) || o.warmup_epochs > o.epochs) {
    return Bad("warmup_epochs", o.warmup_epochs, absl::StrCat("must be in [0, --epochs=", o.epochs, "]"));
  }
  if (o.lr_schedule == LrSchedule::kStep && o.lr_step_epochs.empty()) {
    return Bad("lr_step_epochs", "", "--lr_schedule=step needs the epochs at which to decay (e.g. 30,60,80)");
  }
  if (o.lr_schedule != LrSchedule::kStep && !o.lr_step_epochs.empty()) {
    return Bad("lr_step_epochs", absl::StrJoin(o.lr_step_epochs, ","), "only with --lr_schedule=step");
  }
  for (size_t i = 0; i < o.lr_step_epochs.size(); ++i) {
    const int e = o.lr_step_epochs[i];
    if (e < 1 || (i > 0 && e <= o.lr_step_epochs[i - 1])) {
      return Bad("lr_step_epochs", absl::StrJoin(o.lr_step_epochs, ","),
                 "must be increasing epochs >= 1");
    }
  }
  if (!(o.lr_step_gamma > 0 && o.lr_step_gamma <= 1)) {
    return Bad("lr_step_gamma", o.lr_step_gamma, "must be in (0, 1]");
  }
  if (!(o.lr_min >= 0 && o.lr_min < o.learning_rate)) {
    return Bad("lr_min", o.lr_min, "must be in [0, --lr)");
  }
  if (o.lr_min > 0 && o.lr_schedule != LrSchedule::kCosine) {
    return Bad("lr_min", o.lr_min, "only with --lr_schedule=cosine");
  }
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) {
    return Bad("label_smoothing", o.label_smoothing, "must be in [0, 1)");
  }
  if (!(o.clip_grad_norm >= 0) || !Finite(o.clip_grad_norm)) {
    return Bad("clip_grad_norm", o.clip_grad_norm, "must be >= 0 (0: no clipping)");
  }
  if (o.accumulate < 1) return Bad("accumulate", o.accumulate, "must be >= 1");

  if (o.val_every < 0) return Bad("val_every", o.val_every, "must be >= 0 (0: no validation)");
  if (o.val_batch_size < 0) return Bad("val_batch_size", o.val_batch_size, "must be >= 0 (0: --batch_size)");

  if (o.checkpoint_every_steps < 0) {
    return Bad("checkpoint_every_steps", o.checkpoint_every_steps, "must be >= 0");
  }
  if (o.checkpoint_every_epochs < 0) {
    return Bad("checkpoint_every_epochs", o.checkpoint_every_epochs, "must be >= 0");
  }
  if (o.keep_checkpoints < 0) return Bad("keep_checkpoints", o.keep_checkpoints, "must be >= 0 (0: keep all)");
  if (o.resume.empty()) return Bad("resume", "", "use auto, none or a checkpoint file");
  if (o.stop_after_steps < 0) return Bad("stop_after_steps", o.stop_after_steps, "must be >= 0");
  if (o.stop_after_steps > 0 && o.checkpoint_dir.empty()) {
    return Bad("stop_after_steps", o.stop_after_steps,
               "needs --checkpoint_dir (the run stops to be resumed from its checkpoint)");
  }

  if (o.device != "auto" && o.device != "cuda" && o.device != "cpu") {
    return Bad("device", o.device, "use auto, cuda or cpu");
  }
  if (o.log_every < 1) return Bad("log_every", o.log_every, "must be >= 1");
  if (o.progress != "auto" && o.progress != "inplace" && o.progress != "lines") {
    return Bad("progress", o.progress, "use auto, inplace or lines");
  }
  if (o.profile_steps < 0) return Bad("profile_steps", o.profile_steps, "must be >= 0");
  if (o.synthetic_steps < 0) return Bad("synthetic_steps", o.synthetic_steps, "must be >= 0");
  if (o.warmup_steps < 0) return Bad("warmup_steps", o.warmup_steps, "must be >= 0");
  if (o.synthetic_steps > 0 && o.data_only) {
    return Bad("data_only", "true", "measures the data service; not with --synthetic_steps");
  }
  if (!(o.cache_release_fraction > 0 && o.cache_release_fraction <= 1)) {
    return Bad("cache_release_fraction", o.cache_release_fraction, "must be in (0, 1]");
  }
  if (!(o.init_scale > 0) || !Finite(o.init_scale)) return Bad("init_scale", o.init_scale, "must be > 0");
  if (!(o.growth_factor > 1) || !Finite(o.growth_factor)) {
    return Bad("growth_factor", o.growth_factor, "must be > 1");
  }
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) {
    return Bad("backoff_factor", o.backoff_factor, "must be in (0, 1)");
  }
  if (o.growth_interval < 1) return Bad("growth_interval", o.growth_interval, "must be >= 1");
  return absl::OkStatus();
}

}  // namespace stoker::trainer
