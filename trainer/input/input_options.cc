#include "trainer/input/input_options.h"

#include "absl/strings/str_cat.h"
#include "common/flag_value.h"

namespace stoker::trainer {

absl::Status InputOptions::Validate() const {
  if (data_socket.empty() && synthetic_steps == 0) {
    return absl::InvalidArgumentError(
        "--data_socket is required (the launcher passes it), unless --synthetic_steps is set");
  }
  if (batch_size < 1) return FlagValueError("batch_size", batch_size, "must be >= 1");
  if (image_size < 8) return FlagValueError("image_size", image_size, "must be >= 8");
  if (ring_slots < 3) return FlagValueError("ring_slots", ring_slots, "must be >= 3");
  if (data_timeout <= absl::ZeroDuration()) {
    return FlagValueError("data_timeout_s", absl::ToInt64Seconds(data_timeout), "must be >= 1");
  }
  if (synthetic_steps < 0) {
    return FlagValueError("synthetic_steps", synthetic_steps, "must be >= 0");
  }
  if (gpu_decode_share.has_value() && !(*gpu_decode_share >= 0.0 && *gpu_decode_share <= 1.0)) {
    return FlagValueError("gpu_decode_share", *gpu_decode_share, "must be auto or in [0, 1]");
  }
  if (gpu_decode_share_prior.empty()) {
    return FlagValueError("gpu_decode_share_prior", "", "must be auto, none or a file's path");
  }
  if (gpu_decode_arena_mib < kMinGpuDecodeArenaMib ||
      gpu_decode_arena_mib > kMaxGpuDecodeArenaMib) {
    return FlagValueError(
        "gpu_decode_arena_mib", gpu_decode_arena_mib,
        absl::StrCat("must be in [", kMinGpuDecodeArenaMib, ", ", kMaxGpuDecodeArenaMib,
                     "] (a 4096 x 4096 JPEG, the largest deferred, decodes to 48 MiB)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GpuDecodeSharePlan> PlanGpuDecodeShare(const std::optional<double>& flag, bool cuda,
                                                      bool deterministic, bool training_ring) {
  if (flag.has_value()) {
    if (!cuda && *flag > 0.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpu_decode_share=", *flag,
          ": this rank trains on the CPU, which cannot decode JPEGs for the data service; use "
          "auto (the default, 0 on the CPU) or 0"));
    }
    return GpuDecodeSharePlan{*flag, false};
  }
  if (!cuda) return GpuDecodeSharePlan{0.0, false};
  if (deterministic || !training_ring) return GpuDecodeSharePlan{kAutoFixedGpuDecodeShare, false};
  return GpuDecodeSharePlan{0.0, true};
}

}  // namespace stoker::trainer
