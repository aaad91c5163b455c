#include "launcher/rank/job_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/unix_socket.h"

namespace stoker::launcher {
namespace {

// InvalidArgument unless the data service socket path `socket` fits a Unix socket address.
absl::Status CheckSocketPathFits(const std::string& socket) {
  if (socket.size() > kMaxUnixSocketPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data service socket path ", socket, " is too long for a Unix socket (",
                     kMaxUnixSocketPathBytes, " bytes at most): use a shorter --job_id"));
  }
  return absl::OkStatus();
}

// Whether `path` (its lstat in `info`) is this user's to remove, logging when it is not
// (Note [Only the caller's objects are removed]).
bool OwnedByCaller(const std::string& path, const struct stat& info) {
  if (info.st_uid == geteuid()) return true;
  LogWarning("not removing %s: it belongs to uid %d, not to this user (uid %d)", path,
             static_cast<int>(info.st_uid), static_cast<int>(geteuid()));
  return false;
}

// Unlinks the entries of `dir`, open on the directory `dir_path`, whose names satisfy
// `matches` and that are this user's, and returns their paths, sorted. An entry already
// gone is skipped; any other that cannot be removed, or is another user's, is logged and
// kept.
std::vector<std::string> UnlinkMatchingEntries(DIR* dir, absl::string_view dir_path,
                                               absl::FunctionRef<bool(absl::string_view)> matches) {
  std::vector<std::string> removed;
  while (dirent* entry = readdir(dir)) {
    if (!matches(entry->d_name)) continue;
    std::string path = absl::StrCat(dir_path, "/", entry->d_name);
    struct stat info;
    if (fstatat(dirfd(dir), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!OwnedByCaller(path, info)) continue;
    if (unlinkat(dirfd(dir), entry->d_name, 0) == 0) {
      removed.push_back(std::move(path));
    } else if (errno != ENOENT) {
      LogWarning("cannot remove %s: %s", path, std::strerror(errno));
    }
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

// Collects what nftw removes, bottom-up. nftw has no user pointer, hence the static;
// Remove is not called from two threads at once (the class is not thread-safe).
std::vector<std::string>* removed_entries = nullptr;

int RemoveEntry(const char* path, const struct stat* info, int type, struct FTW* where) {
  if (info != nullptr && type != FTW_NS && !OwnedByCaller(path, *info)) return 0;
  if (where->level > 0) removed_entries->emplace_back(path);
  const int rc = (type == FTW_DP) ? rmdir(path) : unlink(path);
  if (rc != 0 && errno != ENOENT) LogWarning("cannot remove %s: %s", path, std::strerror(errno));
  return 0;
}

}  // namespace

std::string GenerateJobId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
  std::string short_host;
  for (const char* c = host; *c != '\0' && *c != '.' && short_host.size() < 32; ++c) {
    short_host += IsJobIdChar(*c) ? *c : '-';
  }
  if (short_host.empty()) short_host = "host";
  uint32_t random = 0;
  if (getrandom(&random, sizeof(random), 0) != sizeof(random)) {
    random = static_cast<uint32_t>(absl::ToUnixNanos(absl::Now()));
  }
  return absl::StrFormat("%s-%d-%08x", short_host, getpid(), random);
}

std::string JobDirectoryPath(absl::string_view parent, absl::string_view job_id) {
  return absl::StrCat(parent, "/stoker.", job_id);
}

std::string DataSocketPath(absl::string_view parent, absl::string_view job_id) {
  return absl::StrCat(JobDirectoryPath(parent, job_id), "/data.sock");
}

std::string JobIdOfSocketPath(absl::string_view socket_path) {
  const size_t slash = socket_path.rfind('/');
  if (slash == absl::string_view::npos) return "";
  absl::string_view name = socket_path.substr(slash + 1);
  absl::string_view directory = socket_path.substr(0, slash);
  if (name != "data.sock") {
    if (!absl::ConsumePrefix(&name, "node") || !absl::ConsumeSuffix(&name, ".sock") ||
        name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return absl::ascii_isdigit(static_cast<unsigned char>(c));
        })) {
      return "";
    }
  }
  const size_t parent_end = directory.rfind('/');
  absl::string_view job =
      parent_end == absl::string_view::npos ? directory : directory.substr(parent_end + 1);
  if (!absl::ConsumePrefix(&job, "stoker.") || !ValidateJobId(job).ok()) return "";
  return std::string(job);
}

absl::Status CheckDataSocketPath(absl::string_view parent, absl::string_view job_id) {
  return CheckSocketPathFits(DataSocketPath(parent, job_id));
}

absl::StatusOr<JobDirectory> JobDirectory::Create(absl::string_view parent,
                                                  absl::string_view job_id) {
  const absl::Status socket_fits = CheckDataSocketPath(parent, job_id);
  if (!socket_fits.ok()) return socket_fits;
  std::string path = JobDirectoryPath(parent, job_id);
  if (mkdir(path.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          "job directory ", path, " already exists: another job uses --job_id ", job_id,
          ", or an earlier one did not clean up (remove it by hand if no job runs)"));
    }
    return ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  return JobDirectory(std::move(path));
}

JobDirectory::JobDirectory(JobDirectory&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

JobDirectory& JobDirectory::operator=(JobDirectory&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

JobDirectory::~JobDirectory() {
  for (const std::string& leftover : Remove()) LogWarning("removed leftover %s", leftover);
}

std::string JobDirectory::socket_path() const { return absl::StrCat(path_, "/data.sock"); }

std::vector<std::string> JobDirectory::Remove() {
  std::vector<std::string> removed;
  if (path_.empty()) return removed;
  removed_entries = &removed;
  // FTW_DEPTH: children before their directory. FTW_PHYS: never follow a symlink out.
  if (nftw(path_.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
    LogWarning("cannot remove job directory %s: %s", path_, std::strerror(errno));
  }
  removed_entries = nullptr;
  path_.clear();
  return removed;
}

std::vector<std::string> RemoveJobDirectory(absl::string_view parent, absl::string_view job_id) {
  std::string path = JobDirectoryPath(parent, job_id);
  struct stat info;
  if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return {};
  if (!OwnedByCaller(path, info)) return {};
  JobDirectory directory(path);
  std::vector<std::string> removed = directory.Remove();
  if (lstat(path.c_str(), &info) != 0) removed.push_back(std::move(path));
  return removed;
}

std::string NodeSocketPath(absl::string_view parent, absl::string_view job_id, int node_index) {
  return absl::StrCat(JobDirectoryPath(parent, job_id), "/node", node_index, ".sock");
}

absl::Status CheckNodeSocketPath(absl::string_view parent, absl::string_view job_id,
                                 int node_index) {
  return CheckSocketPathFits(NodeSocketPath(parent, job_id, node_index));
}

absl::StatusOr<std::string> MakeNodeJobDirectory(absl::string_view parent,
                                                 absl::string_view job_id) {
  if (absl::Status valid = ValidateJobId(job_id); !valid.ok()) return valid;
  std::string path = JobDirectoryPath(parent, job_id);
  if (mkdir(path.c_str(), 0700) == 0) {
    // mkdir applies the umask, which may take bits from the owner too.
    if (chmod(path.c_str(), 0700) != 0) {
      const int error = errno;
      rmdir(path.c_str());
      return ErrnoToStatus(error, absl::StrCat("chmod 0700 ", path));
    }
    return path;
  }
  if (errno != EEXIST) return ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) return ErrnoToStatus(errno, absl::StrCat("lstat ", path));
  const mode_t mode = info.st_mode & 07777;
  if (S_ISDIR(info.st_mode) && info.st_uid == geteuid() && mode == 0700) return path;
  const char* kind = S_ISDIR(info.st_mode)   ? "a directory"
                     : S_ISLNK(info.st_mode) ? "a symbolic link"
                                             : "not a directory";
  return absl::FailedPreconditionError(absl::StrFormat(
      "job directory %s exists but is %s of uid %d with mode %04o; it must be a directory of "
      "this user (uid %d) with mode 0700 (remove it if no job with id %s runs)",
      path, kind, static_cast<int>(info.st_uid), static_cast<int>(mode),
      static_cast<int>(geteuid()), job_id));
}

void RemoveJobDirectoryIfEmpty(const std::string& path) {
  struct stat info;
  if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return;
  if (!OwnedByCaller(path, info)) return;
  if (rmdir(path.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST) {
    LogWarning("cannot remove job directory %s: %s", path, std::strerror(errno));
  }
}

std::vector<std::string> RemoveSharedMemoryLeftovers(absl::string_view shm_dir,
                                                     absl::string_view job_id) {
  const std::string prefix = absl::StrCat("stoker.", job_id, ".");
  DIR* dir = opendir(std::string(shm_dir).c_str());
  if (dir == nullptr) {
    LogWarning("cannot list %s for leftover segments: %s", shm_dir, std::strerror(errno));
    return {};
  }
  std::vector<std::string> removed = UnlinkMatchingEntries(
      dir, shm_dir, [&prefix](absl::string_view name) { return absl::StartsWith(name, prefix); });
  closedir(dir);
  return removed;
}

}  // namespace stoker::launcher
