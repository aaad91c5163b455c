#include "trainer/report/report_options.h"

#include "common/flag_value.h"

namespace stoker::trainer {

absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view name) {
  return ParseFlagChoice<ProgressMode>("progress", name,
                                       {{"auto", ProgressMode::kAuto},
                                        {"inplace", ProgressMode::kInPlace},
                                        {"lines", ProgressMode::kLines}});
}

absl::Status ReportOptions::Validate() const {
  if (log_every < 1) return FlagValueError("log_every", log_every, "must be >= 1");
  if (profile_steps < 0) {
    return FlagValueError("profile_steps", profile_steps, "must be >= 0");
  }
  if (!kernel_trace.empty() && profile_steps == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel_trace=", kernel_trace, ": needs --profile_steps=N, the steps it records"));
  }
  if (kernel_trace_ops && kernel_trace.empty()) {
    return absl::InvalidArgumentError(
        "--kernel_trace_ops: needs --kernel_trace=PATH, the trace it adds to");
  }
  if (!trace_steps.empty() && trace_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_steps=", trace_steps, ": needs --trace=DIR, where the trace goes"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
