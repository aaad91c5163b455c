#include "trainer/report/report_options.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view name) {
  if (name == "auto") return ProgressMode::kAuto;
  if (name == "inplace") return ProgressMode::kInPlace;
  if (name == "lines") return ProgressMode::kLines;
  return absl::InvalidArgumentError(
      absl::StrCat("--progress=", name, ": use auto, inplace or lines"));
}

absl::Status ReportOptions::Validate() const {
  if (log_every < 1)
    return absl::InvalidArgumentError(absl::StrCat("--log_every=", log_every, ": must be >= 1"));
  if (profile_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--profile_steps=", profile_steps, ": must be >= 0"));
  }
  if (!kernel_trace.empty() && profile_steps == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel_trace=", kernel_trace, ": needs --profile_steps=N, the steps it records"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
