// How a program's Abseil flags become its options struct: one FlagBinding per flag, naming
// the field the flag's value goes to and, where the field is not simply the flag's value,
// the grammar that turns the value into it (a room's Parse function, ParseFlagChoice of
// common/flag_value.h, FlagSeconds). A program's flags.cc then reads as its flag
// definitions followed by one list of bindings.
//
//   TrainerOptions o;
//   RETURN_IF_ERROR(ApplyFlagBindings({
//       {FLAGS_epochs, &o.epochs},
//       {FLAGS_device, &o.device.device, ParseDeviceChoice},
//       {FLAGS_data_timeout_s, &o.input.data_timeout, FlagSeconds},
//   }));
//
// Reading flags is not synchronised with setting them: bind after the parse.
#ifndef STOKER_COMMON_FLAG_BINDING_H_
#define STOKER_COMMON_FLAG_BINDING_H_

#include <functional>
#include <initializer_list>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace stoker {
namespace flag_binding_internal {

template <typename Value, typename Field>
absl::Status Store(Value value, Field* field) {
  *field = std::move(value);
  return absl::OkStatus();
}

template <typename Value, typename Field>
absl::Status Store(absl::StatusOr<Value> value, Field* field) {
  if (!value.ok()) return std::move(value).status();
  *field = *std::move(value);
  return absl::OkStatus();
}

}  // namespace flag_binding_internal

// One flag bound to one field of an options struct that outlives the binding.
class FlagBinding {
 public:
  // The field takes the flag's value as it is.
  template <typename T, typename Field>
  FlagBinding(const absl::Flag<T>& flag, Field* field)
      : apply_(
            [&flag, field] { return flag_binding_internal::Store(absl::GetFlag(flag), field); }) {}

  // The field takes `convert(value)`: a value, or a StatusOr whose error (naming the flag,
  // as the grammars of common/flag_value.h do) leaves the field as it was.
  template <typename T, typename Field, typename Convert>
  FlagBinding(const absl::Flag<T>& flag, Field* field, Convert convert)
      : apply_([&flag, field, convert] {
          return flag_binding_internal::Store(convert(absl::GetFlag(flag)), field);
        }) {}

  // Sets the field from the flag's current value.
  absl::Status Apply() const { return apply_(); }

 private:
  std::function<absl::Status()> apply_;
};

// Applies `bindings` in order; the first error stops there and is returned.
inline absl::Status ApplyFlagBindings(std::initializer_list<FlagBinding> bindings) {
  for (const FlagBinding& binding : bindings) {
    absl::Status status = binding.Apply();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// The grammar of the `*_s` flags: whole seconds, as a Duration.
inline absl::Duration FlagSeconds(int seconds) { return absl::Seconds(seconds); }

}  // namespace stoker

#endif  // STOKER_COMMON_FLAG_BINDING_H_
