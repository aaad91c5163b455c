// Who owns a job's files on this machine, and the removal of the files of jobs whose owner
// is gone. The launcher (or, for a job no launcher on the machine owns, the local rank 0 that
// starts the node's data service: launcher/rank/node_data_service.h) writes
// <tmp>/stoker.<job_id>.owner (0600) naming itself when a job starts and removes it when the
// job's files are gone; an owner killed with SIGKILL leaves it, with whatever its children
// left (the job directory and the sockets in it, segments /dev/shm/stoker.<job_id>.*). The next
// launcher or local rank 0 on the machine finds such records whose process no longer exists
// and removes those files (Note [Stale jobs]).
#ifndef STOKER_LAUNCHER_RANK_JOB_OWNER_H_
#define STOKER_LAUNCHER_RANK_JOB_OWNER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace stoker::launcher {

// Note [Stale jobs]
// A process is named by more than its pid: pids are reused, and processes in other pid
// namespaces (containers, Bazel's sandboxed tests) share /tmp and /dev/shm but not pids. So
// an owner record holds the pid, the process's start time (field 22 of /proc/<pid>/stat),
// the pid namespace (/proc/self/ns/pid) and the boot id. The owner is
//  - gone when the machine booted since, or (same pid namespace) no process has the pid, or
//    the process with the pid started at another time;
//  - alive when (same namespace) the process with the pid started at the recorded time;
//  - unknown otherwise (another pid namespace): its files are left alone.
// Only records of this user are considered, and a job's files are removed only when its
// record says its owner is gone.
//
// Judging a record and removing its job's files must not race a new job of the same id
// starting at the same time (it would lose the files it just made). So the owner holds an
// exclusive flock on its record for the job's whole life, and whoever judges a record
// (a sweep, a new job taking the id over) first takes that lock without waiting: a record
// whose lock is held belongs to a live job, whatever its pid says. With the lock, the judge
// checks that the record's name still leads to the file it locked (not one made anew),
// then judges, removes the files and the record, and only then lets the lock go; a new job
// makes its record with O_EXCL and locks it before it makes anything else.

// The identity of a process. Plain data.
struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_time = 0;    // clock ticks after boot (/proc/<pid>/stat field 22)
  std::string pid_namespace;  // "pid:[4026531836]"
  std::string boot_id;

  // This process.
  static absl::StatusOr<ProcessIdentity> Self();
  // "pid start_time pid_namespace boot_id\n", and back. InvalidArgument on bad text.
  std::string ToText() const;
  static absl::StatusOr<ProcessIdentity> FromText(absl::string_view text);
};

enum class OwnerState { kAlive, kGone, kUnknown };

// Judges `owner` from this process's point of view (Note [Stale jobs]).
OwnerState JudgeOwner(const ProcessIdentity& owner);

// "<parent>/stoker.<job_id>.owner".
std::string JobOwnerPath(absl::string_view parent, absl::string_view job_id);

// The owner record of one job, held by the launcher for the whole job. Move-only; the
// destructor removes the record. Not thread-safe.
class JobOwnerRecord {
 public:
  // Writes the record for this process (O_EXCL, 0600). When a record is there already:
  // AlreadyExists naming its owner while that one is alive or unknown; when its owner is
  // gone, the stale job's files are removed first (each logged) and the record is taken
  // over.
  static absl::StatusOr<JobOwnerRecord> Create(absl::string_view parent, absl::string_view shm_dir,
                                               absl::string_view job_id);

  JobOwnerRecord(JobOwnerRecord&& other) noexcept;
  JobOwnerRecord& operator=(JobOwnerRecord&& other) noexcept;
  JobOwnerRecord(const JobOwnerRecord&) = delete;
  JobOwnerRecord& operator=(const JobOwnerRecord&) = delete;
  ~JobOwnerRecord();

  const std::string& path() const { return path_; }

 private:
  JobOwnerRecord(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  void Release();
  std::string path_;  // empty once moved from
  int lock_fd_ = -1;  // the record, open and flock-ed (Note [Stale jobs])
};

// What RemoveStaleJobs removed for one dead job.
struct StaleJob {
  std::string job_id;
  pid_t owner_pid = 0;
  std::vector<std::string> removed;  // paths, the owner record last
};

// Finds the owner records <parent>/stoker.*.owner of this user whose owner is gone and
// removes each such job's files: the job directory <parent>/stoker.<id> with what is in it
// (the launcher's socket or the node sockets, each object owner-checked), the segments
// <shm_dir>/stoker.<id>.*, then the record. Never fails: what cannot be read or removed is logged
// and skipped.
std::vector<StaleJob> RemoveStaleJobs(absl::string_view parent, absl::string_view shm_dir);

// RemoveStaleJobs, with a warning per removed path: "<log_prefix>removed PATH of the dead
// job ID (its owner, pid P, is gone)".
void RemoveStaleJobsAndLog(absl::string_view parent, absl::string_view shm_dir,
                           absl::string_view log_prefix);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_JOB_OWNER_H_
