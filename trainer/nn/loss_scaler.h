// Dynamic loss scaling for mixed-precision training, with exactly the semantics of
// torch.amp.GradScaler: the same scale sequence, the same skipped steps, the same unscaled
// gradients, and no host synchronisation except where GradScaler has one.
#ifndef STOKER_TRAINER_NN_LOSS_SCALER_H_
#define STOKER_TRAINER_NN_LOSS_SCALER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/nn/loss_scaler_options.h"

namespace stoker::trainer {

// torch.amp.GradScaler's constructor arguments, with its defaults.
// Scales the loss before backward, unscales the gradients after it while checking them for
// inf/NaN, skips the optimizer step when one was found, and updates the scale:
//   found inf/NaN: scale *= backoff_factor, growth_tracker = 0;
//   else: ++growth_tracker; when it reaches growth_interval,
//         scale *= growth_factor (if the result is finite) and growth_tracker = 0
// (at::_amp_update_scale_, the kernel GradScaler.update calls).
//
// The scale (float32) and growth tracker (int32) are 0-dim tensors created by the first
// Scale() on the loss's device, as GradScaler does. Synchronisation with the device:
// Scale, Unscale, Update and Restore only enqueue work on the current stream; Step reads
// the inf flag (one device-to-host sync, as GradScaler.step); state() and scale() read the
// tensors (a sync). An optimizer that can skip on the device may use found_inf() instead of
// Step() and call Update() directly.
//
// Per iteration, in this order (FailedPrecondition otherwise, as GradScaler raises):
//   loss_scaler.Scale(loss).backward();
//   RETURN_IF_ERROR(loss_scaler.Unscale(grads));   // before gradient clipping
//   RETURN_IF_ERROR(loss_scaler.Step([&] { return optimizer_step(); }));
//   RETURN_IF_ERROR(loss_scaler.Update());
// One set of gradients (one optimizer) per iteration. When disabled, Scale returns the loss,
// Unscale and Update do nothing and Step always steps.
//
// Owned by the training thread (thread-compatible).
class LossScaler {
 public:
  // What a checkpoint keeps: GradScaler.state_dict()'s "scale" and "_growth_tracker".
  struct State {
    double scale = 65536.0;
    int64_t growth_tracker = 0;
  };

  // InvalidArgument unless init_scale is finite and > 0, growth_factor > 1,
  // 0 < backoff_factor < 1 and growth_interval >= 1 (checked only when enabled).
  static absl::StatusOr<LossScaler> Create(const LossScalerOptions& options);

  LossScaler(LossScaler&&) = default;
  LossScaler& operator=(LossScaler&&) = default;
  LossScaler(const LossScaler&) = delete;
  LossScaler& operator=(const LossScaler&) = delete;

  bool enabled() const { return options_.enabled; }

  // `loss * scale` (scale moved to the loss's device without blocking); the loss itself when
  // disabled. The first call creates the scale tensors on the loss's device. Like any
  // libtorch op it throws c10::Error for an undefined loss.
  at::Tensor Scale(const at::Tensor& loss);

  // Multiplies every defined gradient in place by 1/scale (the reciprocal taken in float64,
  // as GradScaler does) and records whether any element was inf or NaN, with
  // at::_amp_foreach_non_finite_check_and_unscale_ per (device, dtype) group; sparse
  // gradients are unscaled through their values. No sync. InvalidArgument for a float16
  // gradient (GradScaler refuses to unscale them too; nothing is changed then);
  // FailedPrecondition before the first Scale or when called twice before Update.
  absl::Status Unscale(std::vector<at::Tensor>& grads);

  // Runs `optimizer_step` unless Unscale found inf/NaN; StepSkipped() then says which.
  // Syncs once with the scale's device. Returns the optimizer's error, or
  // FailedPrecondition before Unscale, when Unscale saw no defined gradient, or when called
  // twice before Update.
  absl::Status Step(absl::FunctionRef<absl::Status()> optimizer_step);

  // Whether the last Step skipped the optimizer (false before any Step).
  bool StepSkipped() const { return step_skipped_; }

  // Updates the scale and growth tracker from this iteration's inf/NaN flag and readies the
  // next iteration. No sync. FailedPrecondition unless Unscale recorded gradients.
  absl::Status Update();

  // This iteration's flag after Unscale: a float32 0-dim tensor on the scale's device, > 0
  // iff a gradient had an inf or NaN; undefined before Unscale or when disabled.
  const at::Tensor& found_inf() const { return found_inf_; }

  // The current scale; 1.0 when disabled. Syncs.
  double scale() const { return state().scale; }

  // The scale and growth tracker ({1, 0} when disabled). Syncs; call after Update.
  State state() const;

  // Continues from `state` (GradScaler.load_state_dict): fills the tensors if they exist,
  // else becomes the initial values. No sync. InvalidArgument unless scale is finite and > 0
  // and growth_tracker >= 0. Does nothing when disabled.
  absl::Status Restore(const State& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };

  explicit LossScaler(const LossScalerOptions& options);

  LossScalerOptions options_;
  State initial_;              // used by the first Scale
  at::Tensor scale_;           // float32, 0-dim; undefined until the first Scale
  at::Tensor growth_tracker_;  // int32, 0-dim, on scale_'s device
  at::Tensor found_inf_;       // float32, 0-dim, on scale_'s device; defined after Unscale
  Stage stage_ = Stage::kReady;
  bool step_skipped_ = false;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_LOSS_SCALER_H_
