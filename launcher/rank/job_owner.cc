#include "launcher/rank/job_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/unique_fd.h"
#include "launcher/rank/job_files.h"

namespace stoker::launcher {
namespace {

constexpr absl::string_view kOwnerSuffix = ".owner";

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Field 22 (starttime) and field 3 (state) of /proc/<pid>/stat; nullopt when there is no
// such process.
struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
};
absl::optional<ProcStat> ReadProcStat(pid_t pid) {
  const std::string text = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  // The command name (field 2) is in parentheses and may hold spaces: parse after the last ')'.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return absl::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text).substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state), so field 22 is fields[19].
  ProcStat stat;
  if (fields.size() < 20 || fields[0].empty() || !absl::SimpleAtoi(fields[19], &stat.start_time)) {
    return absl::nullopt;
  }
  stat.state = fields[0][0];
  return stat;
}

std::string ReadLink(const char* path) {
  char buffer[256] = {};
  const ssize_t n = readlink(path, buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

// The files of job `job_id` (not its owner record), removed.
std::vector<std::string> RemoveJobFiles(absl::string_view parent, absl::string_view shm_dir,
                                        absl::string_view job_id) {
  std::vector<std::string> removed = RemoveJobDirectory(parent, job_id);
  for (std::string& path : RemoveSharedMemoryLeftovers(shm_dir, job_id))
    removed.push_back(std::move(path));
  return removed;
}

// A record, opened and locked for judging (Note [Stale jobs]).
struct LockedRecord {
  UniqueFd fd;
  enum class State { kLocked, kHeld, kMissing, kNotOurs } state = State::kMissing;
};

// Opens the record at `path` (never through a symlink) and takes its lock without waiting:
// kHeld when a live job holds it, kMissing when there is no such record or it was replaced
// after it was opened, kNotOurs when it is not a regular file of this user.
LockedRecord LockRecord(const std::string& path) {
  LockedRecord record;
  record.fd = UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!record.fd.valid()) {
    record.state = errno == ENOENT ? LockedRecord::State::kMissing : LockedRecord::State::kNotOurs;
    return record;
  }
  struct stat opened;
  if (fstat(record.fd.get(), &opened) != 0 || !S_ISREG(opened.st_mode) ||
      opened.st_uid != geteuid()) {
    record.state = LockedRecord::State::kNotOurs;
    return record;
  }
  if (flock(record.fd.get(), LOCK_EX | LOCK_NB) != 0) {
    record.state = LockedRecord::State::kHeld;
    return record;
  }
  struct stat named;
  if (lstat(path.c_str(), &named) != 0 || named.st_dev != opened.st_dev ||
      named.st_ino != opened.st_ino) {
    record.state = LockedRecord::State::kMissing;  // removed or made anew meanwhile
    return record;
  }
  record.state = LockedRecord::State::kLocked;
  return record;
}

// Reads the record open on `fd` (named `path`): nullopt (logged when `log`) when it
// cannot be parsed.
absl::optional<ProcessIdentity> ReadRecord(int fd, const std::string& path, bool log) {
  std::string text(512, '\0');
  const ssize_t n = pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  absl::StatusOr<ProcessIdentity> owner = ProcessIdentity::FromText(text);
  if (!owner.ok()) {
    if (log) LogWarning("ignoring the job owner record %s: %s", path, owner.status().message());
    return absl::nullopt;
  }
  return *owner;
}

}  // namespace

absl::StatusOr<ProcessIdentity> ProcessIdentity::Self() {
  ProcessIdentity self;
  self.pid = getpid();
  absl::optional<ProcStat> stat = ReadProcStat(self.pid);
  if (!stat.has_value()) {
    return absl::UnavailableError("cannot read /proc/self/stat (is /proc mounted?)");
  }
  self.start_time = stat->start_time;
  self.pid_namespace = ReadLink("/proc/self/ns/pid");
  self.boot_id =
      std::string(absl::StripAsciiWhitespace(ReadSmallFile("/proc/sys/kernel/random/boot_id")));
  if (self.pid_namespace.empty()) self.pid_namespace = "-";
  if (self.boot_id.empty()) self.boot_id = "-";
  return self;
}

std::string ProcessIdentity::ToText() const {
  return absl::StrCat(pid, " ", start_time, " ", pid_namespace, " ", boot_id, "\n");
}

absl::StatusOr<ProcessIdentity> ProcessIdentity::FromText(absl::string_view text) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  ProcessIdentity identity;
  if (fields.size() != 4 || !absl::SimpleAtoi(fields[0], &identity.pid) || identity.pid <= 0 ||
      !absl::SimpleAtoi(fields[1], &identity.start_time)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not \"pid start_time pid_namespace boot_id\": \"",
                     absl::StripAsciiWhitespace(text), "\""));
  }
  identity.pid_namespace = std::string(fields[2]);
  identity.boot_id = std::string(fields[3]);
  return identity;
}

OwnerState JudgeOwner(const ProcessIdentity& owner) {
  absl::StatusOr<ProcessIdentity> self = ProcessIdentity::Self();
  if (!self.ok()) return OwnerState::kUnknown;
  if (owner.boot_id != "-" && self->boot_id != "-" && owner.boot_id != self->boot_id) {
    return OwnerState::kGone;  // the machine booted since
  }
  if (owner.pid_namespace != self->pid_namespace) return OwnerState::kUnknown;
  absl::optional<ProcStat> stat = ReadProcStat(owner.pid);
  if (!stat.has_value()) return OwnerState::kGone;
  if (stat->start_time != owner.start_time) return OwnerState::kGone;  // the pid was reused
  if (stat->state == 'Z' || stat->state == 'X') return OwnerState::kGone;
  return OwnerState::kAlive;
}

std::string JobOwnerPath(absl::string_view parent, absl::string_view job_id) {
  return absl::StrCat(parent, "/stoker.", job_id, kOwnerSuffix);
}

absl::StatusOr<JobOwnerRecord> JobOwnerRecord::Create(absl::string_view parent,
                                                      absl::string_view shm_dir,
                                                      absl::string_view job_id) {
  absl::StatusOr<ProcessIdentity> self = ProcessIdentity::Self();
  if (!self.ok()) return self.status();
  const std::string path = JobOwnerPath(parent, job_id);
  for (int attempt = 0; attempt < 3; ++attempt) {
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.valid()) {
      // Locked before anything of the job exists (Note [Stale jobs]).
      const std::string text = self->ToText();
      if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0 || fchmod(fd.get(), 0600) != 0 ||
          write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        const int error = errno;
        unlink(path.c_str());
        return stoker::ErrnoToStatus(error, absl::StrCat("writing the job owner record ", path));
      }
      return JobOwnerRecord(path, fd.Release());
    }
    if (errno != EEXIST) {
      return stoker::ErrnoToStatus(errno, absl::StrCat("creating the job owner record ", path));
    }
    LockedRecord locked = LockRecord(path);
    if (locked.state == LockedRecord::State::kMissing) continue;  // gone meanwhile: retry
    if (locked.state == LockedRecord::State::kHeld) {
      absl::optional<ProcessIdentity> holder = ReadRecord(locked.fd.get(), path, /*log=*/false);
      if (holder.has_value() && JudgeOwner(*holder) == OwnerState::kAlive) {
        return absl::AlreadyExistsError(absl::StrCat("--job_id ", job_id,
                                                     " is in use by the running launcher pid ",
                                                     holder->pid, " (", path, ")"));
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "--job_id ", job_id, " is in use by a running job (it holds the lock of ", path, ")"));
    }
    absl::optional<ProcessIdentity> owner = locked.state == LockedRecord::State::kLocked
                                                ? ReadRecord(locked.fd.get(), path, /*log=*/false)
                                                : absl::nullopt;
    if (!owner.has_value()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "--job_id ", job_id, " is taken: ", path,
          " exists but names no process of this user (remove it if no such job runs)"));
    }
    switch (JudgeOwner(*owner)) {
      case OwnerState::kAlive:
        return absl::AlreadyExistsError(absl::StrCat("--job_id ", job_id,
                                                     " is in use by the running launcher pid ",
                                                     owner->pid, " (", path, ")"));
      case OwnerState::kUnknown:
        return absl::AlreadyExistsError(
            absl::StrCat("--job_id ", job_id, " is in use by launcher pid ", owner->pid,
                         " of another pid namespace (", path, "; remove it if no such job runs)"));
      case OwnerState::kGone:
        for (const std::string& removed : RemoveJobFiles(parent, shm_dir, job_id)) {
          LogWarning("removed %s of the earlier job %s (its owner, pid %d, is gone)", removed,
                     job_id, owner->pid);
        }
        if (unlink(path.c_str()) != 0 && errno != ENOENT) {
          return stoker::ErrnoToStatus(errno,
                                       absl::StrCat("removing the stale job owner record ", path));
        }
        break;  // the lock goes with `locked`, after the record
    }
  }
  return absl::AlreadyExistsError(
      absl::StrCat("--job_id ", job_id, ": another launcher took ", path));
}

JobOwnerRecord::JobOwnerRecord(JobOwnerRecord&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      lock_fd_(std::exchange(other.lock_fd_, -1)) {}

JobOwnerRecord& JobOwnerRecord::operator=(JobOwnerRecord&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::exchange(other.path_, std::string());
    lock_fd_ = std::exchange(other.lock_fd_, -1);
  }
  return *this;
}

JobOwnerRecord::~JobOwnerRecord() { Release(); }

void JobOwnerRecord::Release() {
  // The record first, then its lock (Note [Stale jobs]).
  if (!path_.empty() && unlink(path_.c_str()) != 0 && errno != ENOENT) {
    LogWarning("cannot remove the job owner record %s: %s", path_, std::strerror(errno));
  }
  path_.clear();
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
}

std::vector<StaleJob> RemoveStaleJobs(absl::string_view parent, absl::string_view shm_dir) {
  std::vector<std::string> job_ids;
  DIR* dir = opendir(std::string(parent).c_str());
  if (dir == nullptr) return {};
  while (dirent* entry = readdir(dir)) {
    absl::string_view name = entry->d_name;
    if (!absl::ConsumePrefix(&name, "stoker.") || !absl::ConsumeSuffix(&name, kOwnerSuffix))
      continue;
    if (ValidateJobId(name).ok()) job_ids.emplace_back(name);
  }
  closedir(dir);
  std::sort(job_ids.begin(), job_ids.end());

  std::vector<StaleJob> stale;
  for (const std::string& job_id : job_ids) {
    const std::string record = JobOwnerPath(parent, job_id);
    // Held until the job's files and record are gone (Note [Stale jobs]).
    LockedRecord locked = LockRecord(record);
    if (locked.state != LockedRecord::State::kLocked) continue;
    absl::optional<ProcessIdentity> owner = ReadRecord(locked.fd.get(), record, /*log=*/true);
    if (!owner.has_value() || JudgeOwner(*owner) != OwnerState::kGone) continue;
    StaleJob job{job_id, owner->pid, RemoveJobFiles(parent, shm_dir, job_id)};
    if (unlink(record.c_str()) == 0) {
      job.removed.push_back(record);
    } else if (errno != ENOENT) {
      LogWarning("cannot remove %s: %s", record, std::strerror(errno));
    }
    stale.push_back(std::move(job));
  }
  return stale;
}

void RemoveStaleJobsAndLog(absl::string_view parent, absl::string_view shm_dir,
                           absl::string_view log_prefix) {
  for (const StaleJob& stale : RemoveStaleJobs(parent, shm_dir)) {
    for (const std::string& path : stale.removed) {
      LogWarning("%sremoved %s of the dead job %s (its owner, pid %d, is gone)", log_prefix, path,
                 stale.job_id, stale.owner_pid);
    }
  }
}

}  // namespace stoker::launcher
