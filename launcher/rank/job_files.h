// The names a job leaves on this machine and their removal: the job id, the job directory
// /tmp/stoker.<job_id>/ (mode 0700) holding the data service sockets (data.sock when the
// launcher runs the service, node<N>.sock when a node's local rank 0 does), and the
// shared-memory segments /dev/shm/stoker.<job_id>.* that the data service creates.
#ifndef STOKER_LAUNCHER_RANK_JOB_FILES_H_
#define STOKER_LAUNCHER_RANK_JOB_FILES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/names.h"  // job ids: ValidateJobId, kMaxJobIdLength

namespace stoker::launcher {

// Returns a new job id, unique on this machine and very likely across machines:
// <short hostname>-<pid>-<8 random hex digits>, e.g. "gpu07-4242-9f31c2aa".
std::string GenerateJobId();

// Note [Only the caller's objects are removed]
// /tmp and /dev/shm are shared by every user of the machine, and a name there proves
// nothing: another user may have made /tmp/stoker.<id>/x or /dev/shm/stoker.<id>.ring.0.
// So every removal of a job's files (the job's own cleanup and the sweeps of dead jobs)
// looks at each object it would remove and removes it only when its owner is this
// process's effective user, also when that is root; another user's object is logged and
// left.

// "<parent>/stoker.<job_id>".
std::string JobDirectoryPath(absl::string_view parent, absl::string_view job_id);

// The job directory, owner-only (0700), created fresh for one job. Move-only; the destructor
// removes it and everything left in it. Not thread-safe.
class JobDirectory {
 public:
  // Creates <parent>/stoker.<job_id>. AlreadyExists when it is there already (another job
  // with this id, or a stale one: it is never reused). InvalidArgument when the socket path
  // inside would not fit a Unix socket address.
  static absl::StatusOr<JobDirectory> Create(absl::string_view parent, absl::string_view job_id);

  JobDirectory(JobDirectory&& other) noexcept;
  JobDirectory& operator=(JobDirectory&& other) noexcept;
  JobDirectory(const JobDirectory&) = delete;
  JobDirectory& operator=(const JobDirectory&) = delete;
  ~JobDirectory();

  const std::string& path() const { return path_; }
  // "<path>/data.sock": where the data service listens.
  std::string socket_path() const;

  // Removes the directory. Returns the paths of whatever was still inside it (and had to
  // be removed too), so the caller can warn about them.
  std::vector<std::string> Remove();

 private:
  friend std::vector<std::string> RemoveJobDirectory(absl::string_view parent,
                                                     absl::string_view job_id);
  explicit JobDirectory(std::string path) : path_(std::move(path)) {}

  std::string path_;  // empty once removed or moved from
};

// Removes the job directory <parent>/stoker.<job_id> of a job that is gone, with whatever is
// in it. Returns the paths removed, the directory last; empty when there was none.
std::vector<std::string> RemoveJobDirectory(absl::string_view parent, absl::string_view job_id);

// "<parent>/stoker.<job_id>/data.sock".
std::string DataSocketPath(absl::string_view parent, absl::string_view job_id);

// The job id in a data service socket path made by DataSocketPath or NodeSocketPath (the
// name of its directory); empty for any other path.
std::string JobIdOfSocketPath(absl::string_view socket_path);

// InvalidArgument when DataSocketPath(parent, job_id) does not fit a Unix socket address.
absl::Status CheckDataSocketPath(absl::string_view parent, absl::string_view job_id);

// "<parent>/stoker.<job_id>/node<node_index>.sock": where node `node_index`'s data service
// listens when the node's local rank 0 started it (Note [Data service per node] in
// launcher/rank/node_data_service.h), inside the job directory that MakeNodeJobDirectory makes.
std::string NodeSocketPath(absl::string_view parent, absl::string_view job_id, int node_index);

// InvalidArgument when NodeSocketPath(parent, job_id, node_index) does not fit a Unix
// socket address.
absl::Status CheckNodeSocketPath(absl::string_view parent, absl::string_view job_id,
                                 int node_index);

// Note [Job directory of the nodes]
// The node sockets of a job live in its job directory <parent>/stoker.<job_id>, owner-only
// like the launcher's. Several nodes of one job may share a machine (and so the directory),
// so it is not made fresh: the first local rank 0 there makes it, the others find it. A
// directory found under that name is used only when it is a real directory (not a symlink)
// of this user with mode 0700; anything else is refused by name, since whoever made it could
// reach or replace the sockets inside. Each node removes its socket when its data service
// stops, and the directory when that leaves it empty: the last node on the machine removes
// it. A node killed with its data service leaves both; the stale-job sweep removes them
// (Note [Stale jobs] in launcher/rank/job_owner.h).

// Makes <parent>/stoker.<job_id> with mode 0700 whatever the umask, or accepts it as it is
// (Note [Job directory of the nodes]). Returns its path; FailedPrecondition naming the path,
// its owner and mode when something else has the name. InvalidArgument for a bad job id.
absl::StatusOr<std::string> MakeNodeJobDirectory(absl::string_view parent,
                                                 absl::string_view job_id);

// Removes the directory `path` when it is empty and this user's; silent when it is not empty
// or gone (another node of the job on this machine still uses it, or it removed it).
void RemoveJobDirectoryIfEmpty(const std::string& path);

// Removes the entries of `shm_dir` named stoker.<job_id>.* (the job's shared-memory
// segments, /dev/shm being where shm_open puts them) and returns their paths.
std::vector<std::string> RemoveSharedMemoryLeftovers(absl::string_view shm_dir,
                                                     absl::string_view job_id);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_JOB_FILES_H_
