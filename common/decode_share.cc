#include "common/decode_share.h"

#include "absl/strings/numbers.h"
#include "common/flag_value.h"

namespace stoker {

absl::StatusOr<std::optional<double>> ParseGpuDecodeShare(absl::string_view value) {
  if (value == "auto") return std::optional<double>();
  double share = 0;
  if (!absl::SimpleAtod(value, &share) || !(share >= 0.0 && share <= 1.0)) {
    return FlagValueError("gpu_decode_share", value, "must be auto or a number in [0, 1]");
  }
  return std::optional<double>(share);
}

}  // namespace stoker
