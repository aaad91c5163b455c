#include "launcher/job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "launcher/options.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/job_owner.h"
#include "launcher/rank/program_paths.h"
#include "launcher/rank/readiness.h"
#include "launcher/termination_signals.h"

namespace stoker::launcher {
namespace {

// How often readiness is probed while the data service starts.
constexpr absl::Duration kReadyProbeInterval = absl::Milliseconds(50);
// How long stray processes may take to die after SIGKILL.
// Note [Stray children]: how long what outlives mpirun, srun or the data service may take to
// exit by itself before SIGKILL, and how long it may take to go after that.
constexpr absl::Duration kStrayGrace = absl::Seconds(2);
constexpr absl::Duration kStrayKillTimeout = absl::Seconds(5);

// Note [Job lifecycle]
// 0. Remove the files of jobs whose launcher is gone, and write this job's owner record
//    <parent>/stoker.<job_id>.owner, removed last (Note [Stale jobs] in launcher/rank/job_owner.h).
//    The children die with the launcher (PR_SET_PDEATHSIG): mpirun by SIGKILL (its ranks
//    follow, theirs being SIGKILL too), the data service by SIGTERM, on which it removes
//    its socket and segments.
// 1. Create the job directory /tmp/stoker.<job_id> (0700); it must not exist yet.
// 2. Start the data service; it is ready once connect(2) to its socket succeeds (the
//    probe connects and closes at once, sending nothing). If it
//    exits first, or --ready_timeout passes, the job fails and mpirun never starts.
// 3. Start mpirun, then wait for the first of {data service, mpirun} to exit:
//    - data service first: it failed, whatever its code (it only exits on SIGTERM); stop
//      mpirun, exit with the code Note [Exit code of a job] gives it (kExitPeerLost unless
//      the service named a cause of its own);
//    - mpirun failed: stop the data service, exit with mpirun's code (the same Note);
//    - mpirun succeeded: SIGTERM the data service, which must exit 0; exit 0.
//    The data service is listed first, so when both have exited by the time we look, the
//    data service is taken as the cause: trainers fail when their data source dies.
// 4. A caught SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 at any point stops both children;
//    exit 128 + signal.
//    The ranks first get the chance to stop with a checkpoint (Note [Stopping with a
//    checkpoint]).
// "Stop" is TerminateAll: SIGTERM to the process group, SIGKILL after --shutdown_grace.
// 5. Always, once no child runs: kill what is left of their descendants (Note [Stray
//    children]), remove /dev/shm/stoker.<job_id>.* and the job directory,
//    warning about anything the children should have removed themselves.
// The cluster modes skip steps 1 and 2 (the nodes' local ranks 0 run the data services,
// Note [Data service per node] in launcher/rank/node_data_service.h): step 3 watches mpirun or
// srun alone, and step 5 removes the job directory /tmp/stoker.<job_id> with the node sockets
// that are still in it, in case this machine was one of the nodes (Note [Job directory of
// the nodes] in launcher/rank/job_files.h).

// Note [Exit code of a job]
// The job exits with the code of the table in common/exit_codes.h that names its first
// failure. mpirun passes on the code of its first failing rank, which already is such a
// code (MPI_Abort's), so it is kept, with one exception: a rank (or mpirun) killed by a
// signal that the ranks do not stop on (SIGKILL by the OOM killer, SIGSEGV) is a lost
// peer (kExitPeerLost), not a resumable stop. The data service exits only on SIGTERM, so
// its death is a lost peer too, unless it exited with a code of its own that names a cause
// (bad flag or dataset folder, bad data).

// Whether `code` is 128 + a signal on which every rank stops at a step boundary
// (trainer/stop_signal.h), i.e. a resumable stop.
bool IsStopSignalCode(int code) {
  for (int signal : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) {
    if (code == ExitCodeForSignal(signal)) return true;
  }
  return false;
}

// Note [Stopping with a checkpoint]
// A scheduler's warning (Slurm's --signal=B:USR1@120, scancel) reaches the launcher, and the
// job should end with a checkpoint at a step boundary before anything is killed. SIGTERM
// to mpirun does not give that: mpirun SIGKILLs its ranks about a second after forwarding
// it, whatever they are doing. So the launcher first sends SIGUSR2 to mpirun or srun, which
// forward it to every rank at once and do nothing else; every rank notes it, the ranks
// agree at the next step boundary to stop (the stop vote, trainer/stop_vote.h), rank 0
// writes a checkpoint and they exit 140. The launcher waits up to --stop_grace for that,
// with the data service still serving, and only then stops whatever still runs as before.
// A second signal meanwhile stops everything at once. The job's code stays 128 + the
// signal the launcher got (143 for SIGTERM, 138 for SIGUSR1): resumable.
constexpr int kStopAtStepBoundarySignal = SIGUSR2;

// The job's code for mpirun's or srun's failure `status` (Note [Exit code of a job]).
int TrainersFailureCode(const ExitStatus& status) {
  const int code = status.ShellCode();
  if (code == 0) return kExitFailure;
  if (status.signaled() || (code > 128 && !IsStopSignalCode(code))) return kExitPeerLost;
  return code;
}

// The job's code for the data service's exit `status` (Note [Exit code of a job]).
int DataServiceFailureCode(const ExitStatus& status) {
  if (status.exited()) {
    for (int cause : {kExitUsage, kExitBadData, kExitCheckpointIo, kExitTimeout}) {
      if (status.exit_code() == cause) return cause;
    }
  }
  return kExitPeerLost;
}

// The data service's exit `status` in words. SIGSYS is its sandbox's kill
// (data_service/sandbox.h), after a line in its log naming the system call.
std::string DataServiceEnd(const ExitStatus& status) {
  std::string text = status.ToString();
  if (status.signaled() && status.signal() == SIGSYS) {
    absl::StrAppend(&text, ", killed by its sandbox (its log names the system call)");
  }
  return text;
}

JobResult Failure(absl::Status status, int exit_code) {
  return JobResult{std::move(status), exit_code == 0 ? 1 : exit_code};
}

JobResult Interrupted(int signal) {
  return Failure(absl::CancelledError(absl::StrCat("interrupted by ", DescribeSignal(signal))),
                 128 + signal);
}

// Drives one RunJob: steps 2 to 4 of Note [Job lifecycle]. Not thread-safe; lives on
// RunJob's stack, and its destructor SIGKILLs whatever child still runs.
class JobRun {
 public:
  JobRun(const JobPlan& plan, TerminationSignals& signals) : plan_(plan), signals_(signals) {}

  // Steps 2 to 4 of Note [Job lifecycle]. When it returns, no child runs.
  JobResult Supervise();

 private:
  // Waits until the data service accepts connections. OK result when it does.
  JobResult AwaitDataService();
  // Stops every child still running; a second signal meanwhile means SIGKILL at once.
  void StopAll();
  // Note [Stopping with a checkpoint]: asks the ranks to stop at a step boundary and waits
  // up to --stop_grace for mpirun (or srun) to exit, or for another signal.
  void StopRanksAtStepBoundary(int signal);
  // Waits for the first of `children` to exit and returns it. When the wait fails or a
  // termination signal comes first, stops every child, sets `*result` to the job's result
  // and returns nullptr; `stopping` names the children in the log line of a signal.
  ChildProcess* AwaitFirstExit(absl::Span<ChildProcess* const> children, absl::string_view stopping,
                               JobResult* result);
  JobResult AfterDataServiceExited();
  JobResult AfterMpirunExited();
  // Step 3 of the cluster modes: mpirun or srun is the only child.
  JobResult SuperviseTrainersAlone();

  const JobPlan& plan_;
  TerminationSignals& signals_;
  absl::optional<ChildProcess> data_service_;
  absl::optional<ChildProcess> mpirun_;
};

void JobRun::StopAll() {
  std::vector<ChildProcess*> running;
  for (absl::optional<ChildProcess>* child : {&mpirun_, &data_service_}) {
    if (child->has_value() && !(*child)->has_exited()) running.push_back(&**child);
  }
  if (running.empty()) return;
  absl::Status stopped = TerminateAll(running, plan_.shutdown_grace, signals_.wake_fd());
  if (!stopped.ok()) LogError("%s", stopped.ToString());
}

ChildProcess* JobRun::AwaitFirstExit(absl::Span<ChildProcess* const> children,
                                     absl::string_view stopping, JobResult* result) {
  absl::StatusOr<WaitResult> first =
      WaitForFirstExit(children, absl::InfiniteDuration(), signals_.wake_fd());
  if (!first.ok()) {
    StopAll();
    *result = Failure(first.status(), 1);
    return nullptr;
  }
  if (first->event == WaitResult::Event::kWoken) {
    const int signal = *signals_.Take();
    StopRanksAtStepBoundary(signal);
    LogWarning("caught %s: stopping %s", DescribeSignal(signal), stopping);
    StopAll();
    *result = Interrupted(signal);
    return nullptr;
  }
  return first->child;
}

void JobRun::StopRanksAtStepBoundary(int signal) {
  if (!mpirun_.has_value() || mpirun_->has_exited() || plan_.stop_grace <= absl::ZeroDuration()) {
    return;
  }
  LogWarning(
      "caught %s: asking the ranks to stop at the next step boundary with a checkpoint "
      "(%s to %s); waiting up to --stop_grace=%s",
      DescribeSignal(signal), DescribeSignal(kStopAtStepBoundarySignal), mpirun_->Describe(),
      absl::FormatDuration(plan_.stop_grace));
  if (absl::Status sent = mpirun_->SignalGroup(kStopAtStepBoundarySignal); !sent.ok()) {
    LogError("%s", sent.ToString());
    return;
  }
  const absl::Time start = absl::Now();
  ChildProcess* trainers = &*mpirun_;
  absl::StatusOr<WaitResult> waited =
      WaitForFirstExit({&trainers, 1}, plan_.stop_grace, signals_.wake_fd());
  if (!waited.ok()) {
    LogError("%s", waited.status().ToString());
    return;
  }
  switch (waited->event) {
    case WaitResult::Event::kExited:
      LogInfo("the ranks stopped after %s: %s %s", absl::FormatDuration(absl::Now() - start),
              mpirun_->Describe(), mpirun_->exit_status()->ToString());
      break;
    case WaitResult::Event::kWoken:
      LogWarning("caught %s as well: stopping at once", DescribeSignal(*signals_.Take()));
      break;
    case WaitResult::Event::kTimedOut:
      LogWarning("the ranks did not stop within --stop_grace=%s",
                 absl::FormatDuration(plan_.stop_grace));
      break;
  }
}

JobResult JobRun::AwaitDataService() {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + plan_.ready_timeout;
  ChildProcess* data_service = &*data_service_;
  std::string last_error;
  while (true) {
    if (AcceptsConnections(plan_.socket_path, &last_error)) {
      LogInfo("data service ready after %s", absl::FormatDuration(absl::Now() - start));
      return JobResult{};
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return Failure(
          absl::DeadlineExceededError(absl::StrCat(
              data_service->Describe(), " did not accept connections on ", plan_.socket_path,
              " within --ready_timeout=", absl::FormatDuration(plan_.ready_timeout),
              " (last error: ", last_error, ")")),
          kExitTimeout);
    }
    absl::StatusOr<WaitResult> waited = WaitForFirstExit(
        {&data_service, 1}, std::min(kReadyProbeInterval, deadline - now), signals_.wake_fd());
    if (!waited.ok()) return Failure(waited.status(), 1);
    switch (waited->event) {
      case WaitResult::Event::kExited:
        return Failure(
            absl::UnavailableError(absl::StrCat(
                data_service->Describe(), " ", DataServiceEnd(*data_service->exit_status()),
                " before it accepted connections on ", plan_.socket_path)),
            DataServiceFailureCode(*data_service->exit_status()));
      case WaitResult::Event::kWoken:
        return Interrupted(*signals_.Take());
      case WaitResult::Event::kTimedOut:
        break;
    }
  }
}

JobResult JobRun::AfterDataServiceExited() {
  const ExitStatus status = *data_service_->exit_status();
  const int code = DataServiceFailureCode(status);
  LogError("%s (exit %d): %s %s while the trainers were running; stopping %s", ExitCause(code),
           code, data_service_->Describe(), DataServiceEnd(status), mpirun_->Describe());
  StopAll();
  return Failure(
      absl::UnavailableError(absl::StrCat(data_service_->Describe(), " ", DataServiceEnd(status),
                                          " while the trainers were running")),
      code);
}

JobResult JobRun::AfterMpirunExited() {
  const ExitStatus trainers = *mpirun_->exit_status();
  if (!trainers.success()) {
    StopAll();
    return Failure(
        absl::UnavailableError(absl::StrCat(mpirun_->Describe(), " ", trainers.ToString())),
        TrainersFailureCode(trainers));
  }
  LogInfo("trainers finished; stopping %s", data_service_->Describe());
  StopAll();
  if (absl::optional<int> signal = signals_.Take()) return Interrupted(*signal);
  const ExitStatus status = *data_service_->exit_status();
  if (!status.success()) {
    return Failure(
        absl::InternalError(absl::StrCat(data_service_->Describe(), " ", status.ToString(),
                                         " after SIGTERM (it should exit 0)")),
        status.ShellCode());
  }
  return JobResult{};
}

JobResult JobRun::SuperviseTrainersAlone() {
  LogInfo("job %s (%s mode): running: %s", plan_.job_id, LaunchModeName(plan_.mode),
          FormatCommand(plan_.trainers.env, plan_.trainers.argv));
  absl::StatusOr<ChildProcess> trainers = ChildProcess::Spawn(plan_.trainers);
  if (!trainers.ok()) return Failure(trainers.status(), 1);
  mpirun_ = std::move(*trainers);
  ChildProcess* children[] = {&*mpirun_};
  JobResult stopped;
  if (AwaitFirstExit(children, mpirun_->Describe(), &stopped) == nullptr) return stopped;
  const ExitStatus status = *mpirun_->exit_status();
  if (!status.success()) {
    return Failure(
        absl::UnavailableError(absl::StrCat(mpirun_->Describe(), " ", status.ToString())),
        TrainersFailureCode(status));
  }
  return JobResult{};
}

JobResult JobRun::Supervise() {
  if (!plan_.data_service.has_value()) return SuperviseTrainersAlone();
  LogInfo("job %s: starting the data service: %s", plan_.job_id,
          FormatCommand(plan_.data_service->env, plan_.data_service->argv));
  absl::StatusOr<ChildProcess> data_service = ChildProcess::Spawn(*plan_.data_service);
  if (!data_service.ok()) return Failure(data_service.status(), 1);
  data_service_ = std::move(*data_service);

  JobResult ready = AwaitDataService();
  if (!ready.status.ok()) {
    StopAll();
    return ready;
  }

  LogInfo("running: %s", FormatCommand(plan_.trainers.env, plan_.trainers.argv));
  absl::StatusOr<ChildProcess> mpirun = ChildProcess::Spawn(plan_.trainers);
  if (!mpirun.ok()) {
    StopAll();
    return Failure(mpirun.status(), 1);
  }
  mpirun_ = std::move(*mpirun);

  ChildProcess* children[] = {&*data_service_, &*mpirun_};
  JobResult stopped;
  ChildProcess* exited = AwaitFirstExit(
      children, absl::StrCat(mpirun_->Describe(), " and ", data_service_->Describe()), &stopped);
  if (exited == nullptr) return stopped;
  return exited == &*data_service_ ? AfterDataServiceExited() : AfterMpirunExited();
}

}  // namespace

absl::StatusOr<JobPlan> PlanJob(const JobConfig& config) {
  RETURN_IF_ERROR(ValidateJobId(config.job_id));
  RETURN_IF_ERROR(
      ValidateJobDeadlines(config.ready_timeout, config.stop_grace, config.shutdown_grace));
  for (const std::string& entry : config.env) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || !IsEnvironmentName(entry.substr(0, equals))) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry '", entry, "' is not NAME=VALUE"));
    }
  }

  JobPlan plan;
  plan.mode = config.trainers.mode;
  plan.job_id = config.job_id;
  plan.job_dir_parent = config.job_dir_parent;
  plan.shm_dir = config.shm_dir;
  plan.ready_timeout = config.ready_timeout;
  plan.shutdown_grace = config.shutdown_grace;
  plan.stop_grace = config.stop_grace;
  const bool local = plan.mode == LaunchMode::kLocal;

  // NVLS stays off whatever the config says: drop other settings, then set it last.
  std::vector<std::string> env;
  for (const std::string& entry : config.env) {
    if (!absl::StartsWith(entry, absl::StrCat(kNvlsEnableVariable, "="))) env.push_back(entry);
  }
  env.push_back(absl::StrCat(kNvlsEnableVariable, "=0"));

  TrainerLaunch trainers = config.trainers;
  trainers.exported_env.insert(trainers.exported_env.begin(), kNvlsEnableVariable);
  if (local) {
    RETURN_IF_ERROR(CheckDataSocketPath(config.job_dir_parent, config.job_id));
    plan.socket_path = DataSocketPath(config.job_dir_parent, config.job_id);
    DataServiceLaunch data_service = config.data_service;
    data_service.socket = plan.socket_path;
    data_service.job_id = config.job_id;
    ASSIGN_OR_RETURN(const std::string data_service_program,
                     ResolveProgram(data_service.program, config.search_path, "--data_service"));
    // The data service runs here, so its folders (or packed index files) must be here.
    const bool packed = data_service.dataset == "packed";
    for (const auto& [flag, path] :
         {std::pair<const char*, const std::string&>{"--train_dir", data_service.train_dir},
          {"--val_dir", data_service.val_dir}}) {
      struct stat info;
      if (path.empty()) continue;
      const bool found = stat(path.c_str(), &info) == 0;
      if (packed && !(found && S_ISREG(info.st_mode))) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, "=", path,
                         ": not a file (--dataset=packed takes the index that "
                         "pack_imagefolder wrote)"));
      }
      if (!packed && !(found && S_ISDIR(info.st_mode))) {
        return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": not a directory"));
      }
    }
    ASSIGN_OR_RETURN(std::vector<std::string> data_service_argv,
                     BuildDataServiceArgv(data_service));
    plan.data_service =
        ChildSpec{"data service", data_service_program, std::move(data_service_argv), env};
    // If the launcher dies (even by SIGKILL), the data service removes its socket and
    // segments on the way out; SIGKILL would leave them.
    plan.data_service->parent_death_signal = SIGTERM;
    plan.data_service->ignore_sigpipe = true;  // its log may outlive a reader of ours
    trainers.data_socket = plan.socket_path;
  } else {
    // Each node's local rank 0 starts its data service with these options (the node's
    // folders are checked there).
    ASSIGN_OR_RETURN(trainers.data_service_args, DataServiceDatasetArgs(config.data_service));
    trainers.data_service = config.data_service.program;
    trainers.job_id = config.job_id;
    RETURN_IF_ERROR(CheckNodeSocketPath(config.job_dir_parent, config.job_id, 0));
  }

  ASSIGN_OR_RETURN(std::vector<std::string> trainers_argv, BuildTrainerArgv(trainers));
  const bool srun = plan.mode == LaunchMode::kSlurm;
  ASSIGN_OR_RETURN(const std::string launcher_program,
                   ResolveProgram(srun ? trainers.srun : trainers.mpirun, config.search_path,
                                  srun ? "--srun" : "--mpirun"));
  if (local) {
    // Remote modes name a path on other machines; here it must exist.
    RETURN_IF_ERROR(ResolveProgram(trainers.trainer, config.search_path, "--trainer").status());
  }
  plan.trainers = ChildSpec{srun ? "srun" : "mpirun", launcher_program, std::move(trainers_argv),
                            std::move(env)};
  return plan;
}

std::string FormatPlan(const JobPlan& plan) {
  if (!plan.data_service.has_value()) {
    return absl::StrCat("# job ", plan.job_id, " (", LaunchModeName(plan.mode),
                        " mode): every node's local rank 0 starts that node's data service\n",
                        FormatCommand(plan.trainers.env, plan.trainers.argv), "\n");
  }
  return absl::StrCat(
      "# job ", plan.job_id, ": the data service, ready once ", plan.socket_path,
      " accepts connections\n", FormatCommand(plan.data_service->env, plan.data_service->argv),
      "\n# then the trainers\n", FormatCommand(plan.trainers.env, plan.trainers.argv), "\n");
}

JobResult RunJob(const JobPlan& plan) {
  absl::StatusOr<TerminationSignals> signals = TerminationSignals::Install();
  if (!signals.ok()) return Failure(signals.status(), 1);
  // Note [Stale jobs] in launcher/rank/job_owner.h: what killed launchers left is removed first,
  // and this job's record (removed last) lets a later launcher do the same for it.
  RemoveStaleJobsAndLog(plan.job_dir_parent, plan.shm_dir, "");
  absl::StatusOr<JobOwnerRecord> owner_record =
      JobOwnerRecord::Create(plan.job_dir_parent, plan.shm_dir, plan.job_id);
  if (!owner_record.ok()) return Failure(owner_record.status(), 1);
  // The cluster modes make no job directory here: the nodes' local ranks 0 make it for their
  // sockets (Note [Job directory of the nodes] in launcher/rank/job_files.h).
  absl::optional<JobDirectory> job_dir;
  if (plan.data_service.has_value()) {
    absl::StatusOr<JobDirectory> created = JobDirectory::Create(plan.job_dir_parent, plan.job_id);
    if (!created.ok()) return Failure(created.status(), 1);
    job_dir = std::move(*created);
  }
  // Note [Stray children]: ranks orphaned by a dying mpirun come to us, not to init.
  absl::StatusOr<bool> was_subreaper = BecomeChildSubreaper();
  if (!was_subreaper.ok()) {
    LogWarning("%s: ranks orphaned by mpirun may outlive the job",
               was_subreaper.status().ToString());
  }

  JobResult result = JobRun(plan, *signals).Supervise();

  std::vector<pid_t> strays = KillStrayChildren({}, kStrayGrace, kStrayKillTimeout);
  if (!strays.empty()) {
    LogWarning("killed %d process(es) still running %s after mpirun or the data service (pids %s)",
               static_cast<int>(strays.size()), absl::FormatDuration(kStrayGrace),
               absl::StrJoin(strays, ", "));
  }
  if (was_subreaper.ok()) RestoreChildSubreaper(*was_subreaper);

  for (const std::string& segment : RemoveSharedMemoryLeftovers(plan.shm_dir, plan.job_id)) {
    LogWarning("removed leftover shared-memory segment %s", segment);
  }
  if (job_dir.has_value()) {
    for (const std::string& leftover : job_dir->Remove()) {
      LogWarning("removed leftover %s", leftover);
    }
  } else {
    for (const std::string& leftover : RemoveJobDirectory(plan.job_dir_parent, plan.job_id)) {
      LogWarning("removed leftover %s", leftover);
    }
  }
  return result;
}

}  // namespace stoker::launcher
