#include "launcher/options.h"

#include "absl/strings/str_cat.h"
#include "common/names.h"
#include "common/status_macros.h"

namespace stoker::launcher {

absl::Status PlacementOptions::Validate() const {
  if (mode != "auto" && mode != "local" && mode != "hosts" && mode != "slurm") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode='", mode, "': use auto, local, hosts or slurm"));
  }
  if (!hostfile.empty() && !hosts.empty()) {
    return absl::InvalidArgumentError("--hostfile and --hosts both name the hosts: give one");
  }
  return absl::OkStatus();
}

absl::Status LauncherOptions::Validate() const {
  RETURN_IF_ERROR(placement.Validate());
  if (!job_id.empty()) RETURN_IF_ERROR(ValidateJobId(job_id));
  return ValidateJobDeadlines(ready_timeout, stop_grace, shutdown_grace);
}

absl::Status ValidateJobDeadlines(absl::Duration ready_timeout, absl::Duration stop_grace,
                                  absl::Duration shutdown_grace) {
  if (ready_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--ready_timeout must be > 0 (got ",
                                                   absl::FormatDuration(ready_timeout), ")"));
  }
  if (stop_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stop_grace must be >= 0 (got ", absl::FormatDuration(stop_grace), ")"));
  }
  if (shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--shutdown_grace must be >= 0 (got ",
                                                   absl::FormatDuration(shutdown_grace), ")"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::launcher
