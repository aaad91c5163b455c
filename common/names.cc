// Job ids and the names built from them.
#include "common/names.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace stoker {

bool IsJobIdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

absl::Status ValidateJobId(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > kMaxJobIdLength ||
      !std::all_of(job_id.begin(), job_id.end(), IsJobIdChar)) {
    return absl::InvalidArgumentError(absl::StrCat("--job_id '", job_id, "' must be 1 to ",
                                                   kMaxJobIdLength,
                                                   " characters of A-Z, a-z, 0-9, '_' and '-'"));
  }
  return absl::OkStatus();
}

std::string RingSegmentName(absl::string_view job_id, int32_t rank, bool train) {
  return absl::StrCat("/stoker.", job_id, ".ring.", rank, train ? "" : ".val");
}

std::string RankFilePath(absl::string_view path, int rank) {
  return absl::StrCat(path, ".rank", rank);
}

}  // namespace stoker
