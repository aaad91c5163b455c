#include "trainer/comm/comm_options.h"

#include "common/flag_value.h"

namespace stoker::trainer {

absl::Status CommOptions::Validate() const {
  if (bucket_mb < 1 || bucket_mb > 4096) {
    return FlagValueError("bucket_mb", bucket_mb, "must be in [1, 4096]");
  }
  if (collective_timeout < absl::Seconds(1)) {
    return FlagValueError("collective_timeout_s", absl::ToInt64Seconds(collective_timeout),
                          "must be at least 1");
  }
  if (collective_abort_grace < absl::ZeroDuration()) {
    return FlagValueError("collective_abort_grace_s", absl::ToInt64Seconds(collective_abort_grace),
                          "must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
