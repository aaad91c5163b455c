#include "data_service/options.h"

#include "absl/strings/str_cat.h"
#include "common/flag_value.h"
#include "common/names.h"
#include "common/status_macros.h"

namespace stoker::data_service {
namespace {

// `--flag: why`, the wording data_service's users and scripts match on for its ranges.
absl::Status Refused(absl::string_view flag, absl::string_view need) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", need));
}

}  // namespace

absl::StatusOr<bool> ParseJpegDecode(absl::string_view value) {
  if (value == "fast") return false;
  if (value == "exact") return true;
  return FlagValueError("jpeg_decode", value, "must be fast or exact");
}

absl::StatusOr<bool> ParseFollowLinks(absl::string_view value) {
  if (value == "yes") return true;
  if (value == "no") return false;
  return FlagValueError("follow_links", value, "must be yes or no");
}

absl::Status DataServiceOptions::Validate() const {
  const ServiceOptions& s = service;
  if (s.socket_path.empty()) return absl::InvalidArgumentError("--socket: required");
  if (s.job_id.empty()) return absl::InvalidArgumentError("--job_id: required");
  RETURN_IF_ERROR(ValidateJobId(s.job_id));
  if (s.node_id < 0) return Refused("node_id", "must not be negative");
  if (dataset.kind != "imagefolder" && dataset.kind != "packed" &&
      (!dataset.train_dir.empty() || !dataset.val_dir.empty())) {
    return absl::InvalidArgumentError(
        "--train_dir/--val_dir: only used with --dataset=imagefolder or packed");
  }
  RETURN_IF_ERROR(s.Validate());
  if (dataset.image_folder.scan_timeout < absl::Seconds(1)) {
    return Refused("scan_timeout_s", "must be positive");
  }
  return absl::OkStatus();
}

}  // namespace stoker::data_service
