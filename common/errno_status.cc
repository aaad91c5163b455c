#include "common/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoker {

absl::Status ErrnoToStatus(int errno_value, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(errno_value));
  switch (errno_value) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(message);
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
      return absl::UnavailableError(message);
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace stoker
