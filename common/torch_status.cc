#include "common/torch_status.h"

#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"

namespace stoker {

absl::Status TorchErrorStatus(const std::exception& e, absl::string_view what) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) {
    return absl::InternalError(
        absl::StrCat(what, ": libtorch: ", torch_error->what_without_backtrace()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

}  // namespace stoker
