#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"

namespace stoker {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Note [Full disk while writing]
// A full file system (ENOSPC, or EDQUOT for a quota) can surface at write(), fsync() or
// close() of the temporary file. Whichever it is, the temporary file is removed and the
// destination keeps its old contents (the rename never happened), so a checkpoint that
// does not fit leaves the previous checkpoints as they were. The error is
// ResourceExhausted and says "ENOSPC"/"EDQUOT", the file, and that nothing was replaced.
absl::Status WriteFailed(int errno_value, absl::string_view what, const std::string& path) {
  absl::Status status = stoker::ErrnoToStatus(errno_value, what);
  if (errno_value != ENOSPC && errno_value != EDQUOT) {
    return absl::Status(status.code(), absl::StrCat("cannot write ", path, ": ", status.message()));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot write ", path, ": ", status.message(), " (",
      errno_value == ENOSPC ? "ENOSPC: the file system of " : "EDQUOT: the disk quota of ",
      DirectoryOf(path), " is full; the partial temporary file was removed and nothing at ", path,
      " was replaced)"));
}

}  // namespace

mode_t DirectoryModeFor(mode_t file_mode) { return (file_mode & 0777) | ((file_mode & 0444) >> 2); }

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents, mode_t mode) {
  return WriteFileAtomically(path, absl::MakeConstSpan(&contents, 1), mode);
}

absl::Status WriteFileAtomically(const std::string& path, absl::Span<const absl::string_view> parts,
                                 mode_t mode, const PartWrittenHook& after_part) {
  return WriteFileAtomicallyWith(path, mode, [&](int fd) {
    size_t written = 0;
    for (absl::string_view part : parts) {
      if (int error = WriteAll(fd, part); error != 0) return error;
      written += part.size();
      if (after_part != nullptr) after_part(written);
    }
    return 0;
  });
}

int WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress: never retried forever
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

int PwriteAll(int fd, absl::string_view data, off_t offset) {
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return 0;
}

absl::Status WriteFileAtomicallyWith(const std::string& path, mode_t mode, const FileFill& fill) {
  const std::string directory = DirectoryOf(path);
  // Unique among this process's writes and other processes' (pid), and not guessable.
  static std::atomic<uint64_t> writes{0};
  uint64_t salt = 0;
  if (::getrandom(&salt, sizeof(salt), 0) != sizeof(salt)) salt = 0;
  salt ^= writes.fetch_add(1);
  const std::string temporary = absl::StrCat(directory, "/.", BaseName(path), kTemporarySuffix,
                                             ::getpid(), "-", absl::Hex(salt, absl::kZeroPad16));
  UniqueFd fd(
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777));
  if (!fd.valid()) return WriteFailed(errno, absl::StrCat("creating ", temporary), path);
  bool keep = false;
  absl::Cleanup remove_temporary = [&] {
    if (!keep) ::unlink(temporary.c_str());
  };
  // The umask must not decide who may read a checkpoint.
  if (::fchmod(fd.get(), mode & 0777) != 0) {
    return WriteFailed(errno, absl::StrCat("chmod of ", temporary), path);
  }
  // Note [Full disk while writing].
  if (int error = fill(fd.get()); error != 0) {
    return WriteFailed(error, absl::StrCat("writing ", temporary), path);
  }
  if (::fsync(fd.get()) != 0) return WriteFailed(errno, absl::StrCat("fsync of ", temporary), path);
  if (::close(fd.Release()) != 0) {
    return WriteFailed(errno, absl::StrCat("closing ", temporary), path);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    return WriteFailed(errno, absl::StrCat("renaming ", temporary, " to ", path), path);
  }
  keep = true;
  // The rename is durable only once the directory entry is.
  UniqueFd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return ErrnoToStatus(errno, absl::StrCat("opening directory ", directory));
  if (::fsync(dir.get()) != 0)
    return ErrnoToStatus(errno, absl::StrCat("fsync of directory ", directory));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("opening ", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat of ", path));
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("reading ", path));
    }
    if (n == 0) break;  // shrank meanwhile
    done += static_cast<size_t>(n);
  }
  data.resize(done);
  return data;
}

absl::Status MakeDirectories(const std::string& path, mode_t mode) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), mode & 0777) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("creating directory ", prefix));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat of ", path));
  if (!S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a directory"));
  return absl::OkStatus();
}

}  // namespace stoker
