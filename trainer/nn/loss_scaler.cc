// LossScaler: torch.amp.GradScaler's algorithm over ATen's AMP kernels (see loss_scaler.h).
#include "trainer/nn/loss_scaler.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace stoker::trainer {
namespace {

// Gradients that one _amp_foreach_non_finite_check_and_unscale_ call takes.
struct GradGroup {
  c10::Device device;
  at::ScalarType dtype;
  std::vector<at::Tensor> grads;
};

}  // namespace

absl::StatusOr<LossScaler> LossScaler::Create(const LossScalerOptions& options) {
  if (options.enabled) {
    if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  }
  return LossScaler(options);
}

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), initial_{options.init_scale, 0} {}

at::Tensor LossScaler::Scale(const at::Tensor& loss) {
  if (!options_.enabled) return loss;
  if (!scale_.defined()) {
    const at::TensorOptions on_device = at::TensorOptions().device(loss.device());
    scale_ = at::full({}, initial_.scale, on_device.dtype(at::kFloat));
    growth_tracker_ = at::full({}, initial_.growth_tracker, on_device.dtype(at::kInt));
  }
  return loss.mul(scale_.to(loss.device(), /*non_blocking=*/true));
}

absl::Status LossScaler::Unscale(std::vector<at::Tensor>& grads) {
  if (!options_.enabled) return absl::OkStatus();
  if (!scale_.defined()) {
    return absl::FailedPreconditionError(
        "LossScaler::Unscale before Scale: scale the loss before backward");
  }
  if (stage_ == Stage::kUnscaled) {
    return absl::FailedPreconditionError("LossScaler::Unscale called twice since the last Update");
  }
  if (stage_ == Stage::kStepped) {
    return absl::FailedPreconditionError("LossScaler::Unscale after Step; call Update first");
  }
  RETURN_IF_ERROR(TorchCall("LossScaler::Unscale", [&]() -> absl::Status {
    // Group first, so that a refused gradient leaves every gradient unchanged.
    std::vector<GradGroup> groups;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (grads[i].scalar_type() == at::kHalf) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LossScaler::Unscale: gradient ", i,
            " is float16; keep parameters (and so gradients) in float32 or bfloat16 and let "
            "autocast run float16"));
      }
      at::Tensor to_unscale = grads[i].is_sparse() ? grads[i]._values() : grads[i];
      GradGroup* group = nullptr;
      for (GradGroup& g : groups) {
        if (g.device == to_unscale.device() && g.dtype == to_unscale.scalar_type()) group = &g;
      }
      if (group == nullptr) {
        groups.push_back({to_unscale.device(), to_unscale.scalar_type(), {}});
        group = &groups.back();
      }
      group->grads.push_back(std::move(to_unscale));
    }

    // Note [Reciprocal in float64]: GradScaler computes 1/scale as
    // scale.double().reciprocal().float(); the unscaled gradients match it bit for bit.
    const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
    // One flag per device (GradScaler's _MultiDeviceReplicator), summed on the scale's.
    std::vector<std::pair<c10::Device, std::pair<at::Tensor, at::Tensor>>> per_device;
    for (GradGroup& group : groups) {
      std::pair<at::Tensor, at::Tensor>* flag_and_inv = nullptr;
      for (auto& entry : per_device) {
        if (entry.first == group.device) flag_and_inv = &entry.second;
      }
      if (flag_and_inv == nullptr) {
        per_device.emplace_back(
            group.device,
            std::make_pair(
                at::full({}, 0.0, scale_.options().dtype(at::kFloat).device(group.device)),
                inv_scale.to(group.device, /*non_blocking=*/true)));
        flag_and_inv = &per_device.back().second;
      }
      at::_amp_foreach_non_finite_check_and_unscale_(group.grads, flag_and_inv->first,
                                                     flag_and_inv->second);
    }
    found_inf_ = at::Tensor();
    for (auto& entry : per_device) {
      at::Tensor flag = entry.second.first.to(scale_.device(), /*non_blocking=*/true);
      found_inf_ = found_inf_.defined() ? found_inf_.add(flag) : flag;
    }
    return absl::OkStatus();
  }));
  stage_ = Stage::kUnscaled;
  return absl::OkStatus();
}

absl::Status LossScaler::Step(absl::FunctionRef<absl::Status()> optimizer_step) {
  if (!options_.enabled) {
    step_skipped_ = false;
    return optimizer_step();
  }
  if (stage_ == Stage::kStepped) {
    return absl::FailedPreconditionError("LossScaler::Step called twice since the last Update");
  }
  if (stage_ == Stage::kReady) {
    return absl::FailedPreconditionError(
        "LossScaler::Step before Unscale: unscale the gradients first");
  }
  if (!found_inf_.defined()) {
    return absl::FailedPreconditionError(
        "LossScaler::Step: no inf checks were recorded (Unscale saw no defined gradient)");
  }
  RETURN_IF_ERROR(
      TorchCall("LossScaler::Step", [&] { step_skipped_ = found_inf_.item<float>() != 0.0f; }));
  if (!step_skipped_) {
    absl::Status status = optimizer_step();
    if (!status.ok()) return status;
  }
  stage_ = Stage::kStepped;
  return absl::OkStatus();
}

absl::Status LossScaler::Update() {
  if (!options_.enabled) return absl::OkStatus();
  if (stage_ == Stage::kReady || !found_inf_.defined()) {
    return absl::FailedPreconditionError(
        "LossScaler::Update: no inf checks were recorded (call Unscale with the gradients)");
  }
  RETURN_IF_ERROR(TorchCall("LossScaler::Update", [&] {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                           options_.backoff_factor, options_.growth_interval);
  }));
  found_inf_ = at::Tensor();
  stage_ = Stage::kReady;
  return absl::OkStatus();
}

LossScaler::State LossScaler::state() const {
  if (!options_.enabled) return State{1.0, 0};
  if (!scale_.defined()) return initial_;
  return State{static_cast<double>(scale_.item<float>()),
               static_cast<int64_t>(growth_tracker_.item<int32_t>())};
}

absl::Status LossScaler::Restore(const State& state) {
  if (!options_.enabled) return absl::OkStatus();
  if (!std::isfinite(state.scale) || state.scale <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler state: scale must be finite and > 0, got ", state.scale));
  }
  if (state.growth_tracker < 0 || state.growth_tracker > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler state: growth_tracker must be in [0, 2^31), got ", state.growth_tracker));
  }
  initial_ = state;
  if (!scale_.defined()) return absl::OkStatus();
  return TorchCall("LossScaler::Restore", [&] {
    scale_.fill_(state.scale);
    growth_tracker_.fill_(state.growth_tracker);
  });
}

}  // namespace stoker::trainer
