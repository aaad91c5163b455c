// The wording of a refused flag value, shared by Stoker's programs and by the trainer's
// rooms whose options come from flags: InvalidArgument "--<flag>=<value>: <need>", naming
// the flag and the value as the user gave them ("--batch_size=0: must be >= 1").
#ifndef STOKER_COMMON_FLAG_ERROR_H_
#define STOKER_COMMON_FLAG_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stoker {

// `value` is anything absl::StrCat formats (a number, a string).
template <typename T>
absl::Status FlagValueError(absl::string_view flag, const T& value, absl::string_view need) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", need));
}

}  // namespace stoker

#endif  // STOKER_COMMON_FLAG_ERROR_H_
