// libtorch's exceptions turned into absl::Status at the edge, so that none crosses a Stoker
// interface.
#ifndef STOKER_COMMON_TORCH_STATUS_H_
#define STOKER_COMMON_TORCH_STATUS_H_

#include <exception>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker {

// Internal error "<what>: libtorch: <message without backtrace>" for a c10::Error (also
// std::exception: "<what>: <e.what()>").
absl::Status TorchErrorStatus(const std::exception& e, absl::string_view what);

namespace internal {
template <typename T>
struct TorchResult {
  using type = absl::StatusOr<T>;
};
template <>
struct TorchResult<void> {
  using type = absl::Status;
};
template <>
struct TorchResult<absl::Status> {
  using type = absl::Status;
};
template <typename T>
struct TorchResult<absl::StatusOr<T>> {
  using type = absl::StatusOr<T>;
};
}  // namespace internal

// Runs f() and turns a libtorch exception into TorchErrorStatus(e, what). f may return void,
// absl::Status, absl::StatusOr<T> or T; the result is absl::Status for void/Status and
// absl::StatusOr<T> for T/StatusOr<T>.
template <typename F>
auto TorchCall(absl::string_view what, F&& f) -> typename internal::TorchResult<std::invoke_result_t<F>>::type {
  using R = std::invoke_result_t<F>;
  try {
    if constexpr (std::is_void_v<R>) {
      std::forward<F>(f)();
      return absl::OkStatus();
    } else {
      return std::forward<F>(f)();
    }
  } catch (const std::exception& e) {
    return TorchErrorStatus(e, what);
  }
}

}  // namespace stoker

#endif  // STOKER_COMMON_TORCH_STATUS_H_
