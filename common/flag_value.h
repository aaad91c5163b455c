// How Stoker's programs, and the trainer's rooms whose options come from flags, check a
// flag's value: the one wording of a refused value, InvalidArgument "--<flag>=<value>:
// <need>" naming the flag and the value as the user gave them ("--batch_size=0: must be
// >= 1"), and the parse of a value that must be one of a few names ("--device=tpu: use
// auto, cuda or cpu").
#ifndef STOKER_COMMON_FLAG_VALUE_H_
#define STOKER_COMMON_FLAG_VALUE_H_

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stoker {

// `value` is anything absl::StrCat formats (a number, a string).
template <typename T>
absl::Status FlagValueError(absl::string_view flag, const T& value, absl::string_view need) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", need));
}

// One name a flag accepts, and what it means.
template <typename T>
struct FlagChoice {
  absl::string_view name;
  T value;
};

// The value of the choice named `text` (exactly); otherwise FlagValueError listing the
// names in order: "--precision=fp4: use bf16, fp16, fp32 or fp8".
template <typename T>
absl::StatusOr<T> ParseFlagChoice(absl::string_view flag, absl::string_view text,
                                  std::initializer_list<FlagChoice<T>> choices) {
  std::string names;
  size_t listed = 0;
  for (const FlagChoice<T>& choice : choices) {
    if (choice.name == text) return choice.value;
    const bool last = ++listed == choices.size();
    absl::StrAppend(&names, listed == 1 ? "" : (last ? " or " : ", "), choice.name);
  }
  return FlagValueError(flag, text, absl::StrCat("use ", names));
}

}  // namespace stoker

#endif  // STOKER_COMMON_FLAG_VALUE_H_
