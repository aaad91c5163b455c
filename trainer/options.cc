#include "trainer/options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/flag_value.h"
#include "common/status_macros.h"
#include "common/trace_events.h"

namespace stoker::trainer {
namespace {}  // namespace

absl::Status ModelOptions::Validate() const {
  if (num_classes < 1) return FlagValueError("num_classes", num_classes, "must be >= 1");
  // An exported program's batch norms run as fused calls (Note [Fused blocks in a program]),
  // which is where they synchronise.
  if (sync_batchnorm && !fused_blocks && IsExportedModel(name)) {
    return absl::InvalidArgumentError(
        "--sync_batchnorm with an exported program (--model=*.pt2) needs --fused_blocks");
  }
  return absl::OkStatus();
}

absl::Status StepOptions::Validate() const {
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    return FlagValueError("label_smoothing", label_smoothing, "must be in [0, 1)");
  if (!(clip_grad_norm >= 0) || !std::isfinite(clip_grad_norm)) {
    return FlagValueError("clip_grad_norm", clip_grad_norm, "must be >= 0 (0: no clipping)");
  }
  if (accumulate < 1) return FlagValueError("accumulate", accumulate, "must be >= 1");
  return absl::OkStatus();
}

absl::Status ValidationOptions::Validate() const {
  if (every < 0) return FlagValueError("val_every", every, "must be >= 0 (0: no validation)");
  if (batch_size < 0)
    return FlagValueError("val_batch_size", batch_size, "must be >= 0 (0: --batch_size)");
  return absl::OkStatus();
}

absl::StatusOr<DeviceChoice> ParseDeviceChoice(absl::string_view name) {
  return ParseFlagChoice<DeviceChoice>(
      "device", name,
      {{"auto", DeviceChoice::kAuto}, {"cuda", DeviceChoice::kCuda}, {"cpu", DeviceChoice::kCpu}});
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  return ParseFlagChoice<Precision>("precision", name,
                                    {{"bf16", Precision::kBFloat16},
                                     {"fp16", Precision::kFloat16},
                                     {"fp32", Precision::kFloat32},
                                     {"fp8", Precision::kFp8}});
}

absl::Status DeviceOptions::Validate() const {
  if (!(cache_release_fraction > 0 && cache_release_fraction <= 1)) {
    return FlagValueError("cache_release_fraction", cache_release_fraction, "must be in (0, 1]");
  }
  if (fp8_amax_history < 1 || fp8_amax_history > 1024) {
    return FlagValueError("fp8_amax_history", fp8_amax_history, "must be in [1, 1024]");
  }
  return absl::OkStatus();
}

absl::Status BenchmarkOptions::Validate() const {
  if (warmup_steps < 0) return FlagValueError("warmup_steps", warmup_steps, "must be >= 0");
  return absl::OkStatus();
}

LrScheduleOptions ScheduleOptionsFor(const TrainerOptions& options, int64_t steps_per_epoch) {
  LrScheduleOptions schedule = options.schedule;
  schedule.base_lr = options.optimizer.learning_rate;
  schedule.epochs = options.epochs;
  schedule.steps_per_epoch = steps_per_epoch;
  return schedule;
}

absl::Status ValidateOptions(const TrainerOptions& o) {
  RETURN_IF_ERROR(o.input.Validate());
  if (o.epochs < 1) return FlagValueError("epochs", o.epochs, "must be >= 1");
  RETURN_IF_ERROR(o.model.Validate());
  RETURN_IF_ERROR(o.comm.Validate());
  // A rank that waits for a batch must give up (naming the data service) before the other
  // ranks' collective watchdogs give up on it (naming it as stalled), or the job's first
  // error would blame the rank instead of its data.
  if (o.input.synthetic_steps == 0 && o.input.data_timeout >= o.comm.collective_timeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_timeout_s=", absl::ToInt64Seconds(o.input.data_timeout),
        " must be less than --collective_timeout_s=",
        absl::ToInt64Seconds(o.comm.collective_timeout),
        ": a rank waiting for a batch must fail, naming the data service, before the other "
        "ranks' collectives time out on it"));
  }
  RETURN_IF_ERROR(o.optimizer.Validate());
  RETURN_IF_ERROR(ScheduleOptionsFor(o, 1).Validate());
  RETURN_IF_ERROR(o.step.Validate());
  RETURN_IF_ERROR(o.validation.Validate());
  RETURN_IF_ERROR(o.checkpoint.Validate());
  RETURN_IF_ERROR(o.report.Validate());
  if (!o.report.trace_steps.empty())
    RETURN_IF_ERROR(ParseTraceSteps(o.report.trace_steps).status());
  RETURN_IF_ERROR(o.benchmark.Validate());
  if (o.input.synthetic_steps > 0 && o.benchmark.data_only) {
    return FlagValueError("data_only", "true",
                          "measures the data service; not with --synthetic_steps");
  }
  RETURN_IF_ERROR(o.device.Validate());
  if (o.device.device == DeviceChoice::kCpu) {
    // The same check, and message, as the ring's once a device is chosen.
    RETURN_IF_ERROR(PlanGpuDecodeShare(o.input.gpu_decode_share, /*cuda=*/false,
                                       o.device.deterministic, /*training_ring=*/true)
                        .status());
  }
  RETURN_IF_ERROR(o.scaler.Validate());
  if (o.device.precision == Precision::kFp8) {
    // Note [FP8 linear layers] (trainer/nn/fp8_linear.h): the rewrite of an exported
    // program's linear layers, on a GPU with FP8 tensor cores (checked once a device is
    // chosen: CheckPrecisionSupported, trainer/device.h).
    if (!IsExportedModel(o.model.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--precision=fp8 runs the linear layers of an exported model (--model=*.pt2) in FP8; "
          "--model=",
          o.model.name, " is built in and has none: use --precision=bf16"));
    }
    if (o.device.device == DeviceChoice::kCpu) {
      return absl::InvalidArgumentError(
          "--precision=fp8 needs a GPU with FP8 tensor cores; --device=cpu has none");
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
