#include "trainer/nn/model_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/exit_codes.h"
#include "common/unique_fd.h"

namespace stoker::trainer {
namespace {

// Errors of open(2) that say the path names no file: the command is wrong, not the storage.
bool NamesNoFile(int error) {
  return error == ENOENT || error == ENOTDIR || error == EISDIR || error == ELOOP ||
         error == ENAMETOOLONG;
}

// InvalidArgument tagged kExitUsage when the path names no file (a bad flag), else the
// errno's own code tagged kExitCheckpointIo.
absl::Status StorageError(int error, absl::string_view flag, absl::string_view path,
                          absl::string_view doing) {
  const absl::Status status = ErrnoToStatus(error, absl::StrCat(flag, "=", path, ": ", doing));
  if (NamesNoFile(error))
    return WithExitCode(absl::InvalidArgumentError(status.message()), kExitUsage);
  return WithExitCode(status, kExitCheckpointIo);
}

}  // namespace

absl::Status RefuseModelFile(absl::string_view flag, absl::string_view path,
                             absl::string_view why) {
  return WithExitCode(absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": ", why)),
                      kExitUsage);
}

absl::StatusOr<std::string> ReadModelFile(absl::string_view flag, const std::string& path,
                                          int64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return StorageError(errno, flag, path, "cannot open the file");
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) return StorageError(errno, flag, path, "cannot stat the file");
  if (!S_ISREG(info.st_mode)) return RefuseModelFile(flag, path, "not a regular file");
  if (info.st_size > max_bytes) {
    return RefuseModelFile(flag, path,
                           absl::StrCat("the file has ", info.st_size, " bytes, over the limit of ",
                                        max_bytes, " bytes for a model or weights file"));
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return StorageError(errno, flag, path, "reading the file");
    if (n == 0) break;
    if (static_cast<int64_t>(bytes.size()) + n > max_bytes) {
      return RefuseModelFile(flag, path,
                             absl::StrCat("the file grew past the limit of ", max_bytes,
                                          " bytes for a model or weights file while it was read"));
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace stoker::trainer
