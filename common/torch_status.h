// Converts libtorch's exceptions (c10::Error and the std::exceptions it throws) into
// absl::Status, once, at the edge: Stoker's own interfaces return Status and let no
// exception cross them. Code that calls libtorch wraps the call in TorchCall, naming what
// it was doing, so that an error says which step failed and libtorch's own message.
//
//   absl::StatusOr<at::Tensor> loss = TorchCall("train step: forward", [&] {
//     return model.forward(images);
//   });
#ifndef STOKER_COMMON_TORCH_STATUS_H_
#define STOKER_COMMON_TORCH_STATUS_H_

#include <exception>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker {

// Internal error "<what>: libtorch: <message without backtrace>" for a c10::Error
// (also std::exception: "<what>: <e.what()>").
absl::Status TorchErrorStatus(const std::exception& e, absl::string_view what);

namespace internal_torch_status {

// The Status type TorchCall returns for a callable returning T.
template <typename T>
struct ResultOf {
  using type = absl::StatusOr<T>;
};
template <>
struct ResultOf<void> {
  using type = absl::Status;
};
template <>
struct ResultOf<absl::Status> {
  using type = absl::Status;
};
template <typename T>
struct ResultOf<absl::StatusOr<T>> {
  using type = absl::StatusOr<T>;
};

}  // namespace internal_torch_status

// Runs f() and turns a libtorch exception into TorchErrorStatus(e, what). f may return
// void, absl::Status, absl::StatusOr<T> or T; the result is absl::Status for void/Status
// and absl::StatusOr<T> for T/StatusOr<T>. A Status that f returns passes unchanged.
template <typename F>
auto TorchCall(absl::string_view what, F&& f) {
  using Returned = std::decay_t<std::invoke_result_t<F&&>>;
  using Result = typename internal_torch_status::ResultOf<Returned>::type;
  try {
    if constexpr (std::is_void_v<Returned>) {
      std::forward<F>(f)();
      return Result(absl::OkStatus());
    } else {
      return Result(std::forward<F>(f)());
    }
  } catch (const std::exception& e) {
    return Result(TorchErrorStatus(e, what));
  }
}

}  // namespace stoker

#endif  // STOKER_COMMON_TORCH_STATUS_H_
