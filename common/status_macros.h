// RETURN_IF_ERROR and ASSIGN_OR_RETURN: Debian's Abseil (20220623) ships no status macros.
#ifndef STOKER_COMMON_STATUS_MACROS_H_
#define STOKER_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STOKER_CONCAT_INNER_(a, b) a##b
#define STOKER_CONCAT_(a, b) STOKER_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status stoker_status_ = (expr);          \
    if (!stoker_status_.ok()) return stoker_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(T x, StatusOr-expr);` declares or assigns `x` from the value, or
// returns the error from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  STOKER_ASSIGN_OR_RETURN_IMPL_(STOKER_CONCAT_(stoker_statusor_, __LINE__), lhs, expr)

#define STOKER_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // STOKER_COMMON_STATUS_MACROS_H_
