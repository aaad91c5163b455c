// One job, from plan to cleanup. Local mode: start the data service and wait until its
// socket accepts connections, run the trainers under mpirun, watch both, stop the other
// side when one fails. Cluster modes (several hosts under mpirun, or srun): run mpirun/srun
// alone (each node's local rank 0 starts that node's data service) and watch it. Always:
// forward SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2, and leave no process, socket or shared-memory
// segment behind on this machine. PlanJob is pure (apart from looking programs up); RunJob does it.
#ifndef STOKER_LAUNCHER_JOB_H_
#define STOKER_LAUNCHER_JOB_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "launcher/launch_command.h"
#include "launcher/rank/child_process.h"

namespace stoker::launcher {

// What the user asked for. Plain data; PlanJob validates it.
struct JobConfig {
  std::string job_id;                   // see ValidateJobId
  std::string job_dir_parent = "/tmp";  // the job directory is <parent>/stoker.<job_id>
  std::string shm_dir = "/dev/shm";     // where the job's segments stoker.<job_id>.* live
  // The data service. PlanJob sets `socket` and `job_id`; `program` may be a bare name,
  // looked up on `search_path`. In the cluster modes only its dataset options are used
  // (handed to the trainers), and `program`, when set, is passed on as the trainers'
  // --data_service (a path on every node).
  DataServiceLaunch data_service;
  // The trainers; `trainers.mode` chooses the mode. PlanJob sets `data_socket` (local) or
  // `job_id` and `data_service_args` (cluster modes), and exports NCCL_NVLS_ENABLE besides
  // `exported_env`; `mpirun` and `srun` may be bare names, looked up on `search_path`.
  TrainerLaunch trainers;
  // NAME=VALUE set for both children over the launcher's own environment. PlanJob appends
  // NCCL_NVLS_ENABLE=0, which always wins.
  std::vector<std::string> env;
  std::string search_path;  // the PATH used to find programs given by bare name
  absl::Duration ready_timeout = absl::Seconds(60);   // --ready_timeout
  absl::Duration shutdown_grace = absl::Seconds(10);  // SIGTERM to SIGKILL (--shutdown_grace)
  // How long the ranks may take to stop at a step boundary with a checkpoint after a
  // SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 to the launcher, before they are stopped (--stop_grace;
  // Note [Stopping with a checkpoint] in job.cc). Zero: stop them at once.
  absl::Duration stop_grace = absl::Seconds(90);
};

// What RunJob executes: the command lines in full, and where the job's files go.
struct JobPlan {
  LaunchMode mode = LaunchMode::kLocal;
  std::string job_id;
  std::string job_dir_parent;
  std::string shm_dir;
  std::string socket_path;                 // local mode only
  absl::optional<ChildSpec> data_service;  // local mode only
  ChildSpec trainers;                      // mpirun or srun
  absl::Duration ready_timeout;
  absl::Duration shutdown_grace;
  absl::Duration stop_grace;
};

// Validates `config` and turns it into the commands to run. InvalidArgument or NotFound,
// naming the launcher flag at fault, on a bad config or a program that is not there.
absl::StatusOr<JobPlan> PlanJob(const JobConfig& config);

// The plan as a commented shell script (what --dry_run prints): one line per command,
// each exactly as RunJob runs it.
std::string FormatPlan(const JobPlan& plan);

// How a job ended. `exit_code` is what the launcher exits with, from the table of
// common/exit_codes.h: 0 on success, else the first failure's code (Note [Exit code of a
// job] in job.cc: a rank's code as mpirun passes it on, kExitPeerLost for a process that
// died, kExitTimeout for --ready_timeout, 128 + signal, or 1 when the launcher failed).
struct JobResult {
  absl::Status status;  // OK, or what failed, naming the process and its pid
  int exit_code = 0;
};

// Runs `plan` to the end (Note [Job lifecycle]). Exit codes: 0 on success; the first
// failure's code; 128 + signal when a SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 stopped the job
// (143 for SIGTERM, e.g. scancel or a preemption; 138 for SIGUSR1, Slurm's warning before
// the time limit with --signal=B:USR1@N). Catches those five signals while
// it runs (so at most one RunJob at a time per process): the first one asks the ranks to
// stop at a step boundary with a checkpoint and waits up to stop_grace for them (Note
// [Stopping with a checkpoint] in job.cc), then stops the job with exit code 128 + signal;
// a second one meanwhile stops everything at once, and one during the shutdown grace
// SIGKILLs at once. Must be
// called from a thread that outlives the job (the children's parent-death signal is tied
// to it). Returns only when both children are reaped and the job's files are removed.
// First removes what jobs of killed launchers left on this machine, and holds this job's
// owner record <job_dir_parent>/stoker.<job_id>.owner throughout (launcher/rank/job_owner.h):
// AlreadyExists while another live launcher holds the job id.
JobResult RunJob(const JobPlan& plan);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_JOB_H_
