#include "trainer/report/report_options.h"

#include "common/flag_error.h"

namespace stoker::trainer {

absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view name) {
  if (name == "auto") return ProgressMode::kAuto;
  if (name == "inplace") return ProgressMode::kInPlace;
  if (name == "lines") return ProgressMode::kLines;
  return FlagValueError("progress", name, "use auto, inplace or lines");
}

absl::Status ReportOptions::Validate() const {
  if (log_every < 1) return FlagValueError("log_every", log_every, "must be >= 1");
  if (profile_steps < 0) {
    return FlagValueError("profile_steps", profile_steps, "must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
