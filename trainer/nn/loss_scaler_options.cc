#include "trainer/nn/loss_scaler_options.h"

#include <cmath>

#include "common/flag_value.h"

namespace stoker::trainer {

absl::Status LossScalerOptions::Validate() const {
  if (!(init_scale > 0) || !std::isfinite(init_scale)) {
    return FlagValueError("init_scale", init_scale, "must be > 0");
  }
  if (!(growth_factor > 1) || !std::isfinite(growth_factor)) {
    return FlagValueError("growth_factor", growth_factor, "must be > 1");
  }
  if (!(backoff_factor > 0 && backoff_factor < 1)) {
    return FlagValueError("backoff_factor", backoff_factor, "must be in (0, 1)");
  }
  if (growth_interval < 1) {
    return FlagValueError("growth_interval", growth_interval, "must be >= 1");
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
