#include "launcher/rank/node_data_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/mpi_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "launcher/rank/data_service_args.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/job_owner.h"
#include "launcher/rank/phase_deadline.h"
#include "launcher/rank/program_paths.h"
#include "launcher/rank/readiness.h"

namespace stoker::launcher {
namespace {

// What rank 0 tells every rank in step 1 of Note [Data service per node]. Bytes on the wire
// between ranks of one job (one build), so a plain struct is enough.
struct JobIdentity {
  int32_t ok = 0;
  uint64_t seed = 0;
  char job_id[kMaxJobIdLength + 1] = {};
  char error[256] = {};
};

// What local rank 0 tells its node in step 3.
struct NodeOutcome {
  int32_t ok = 0;
  char error[768] = {};
};

template <size_t N>
void CopyTruncated(absl::string_view text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

absl::StatusOr<JobIdentity> AgreeOnJob(const RankInfo& rank, MPI_Comm world,
                                       const NodeDataServiceOptions& options) {
  JobIdentity identity;
  if (rank.rank == 0) {
    const std::string job_id = options.job_id.empty() ? GenerateJobId() : options.job_id;
    absl::Status valid = ValidateJobId(job_id);
    if (valid.ok()) {
      identity.ok = 1;
      identity.seed = options.seed;
      CopyTruncated(job_id, identity.job_id);
    } else {
      CopyTruncated(valid.message(), identity.error);
    }
  }
  RETURN_IF_MPI_ERROR(MPI_Bcast(&identity, sizeof(identity), MPI_BYTE, 0, world));
  if (!identity.ok) {
    return absl::InvalidArgumentError(absl::StrCat("rank 0's job id: ", identity.error));
  }
  return identity;
}

// Step 2, on local rank 0. Sets *owner_record unless a live process (the job's launcher on
// this machine) holds the job's record already (Note [Data service per node]).
absl::StatusOr<ChildProcess> StartOnThisNode(const RankInfo& rank, const std::string& job_id,
                                             uint64_t seed, const std::string& socket_path,
                                             const NodeDataServiceOptions& options,
                                             absl::optional<JobOwnerRecord>* owner_record) {
  RETURN_IF_ERROR(CheckNodeSocketPath(options.socket_dir, job_id, rank.node_index));
  // What dead jobs left on this node (Note [Stale jobs] in launcher/rank/job_owner.h).
  RemoveStaleJobsAndLog(options.socket_dir, options.shm_dir,
                        absl::StrCat("node ", rank.node_index, ": "));
  absl::StatusOr<JobOwnerRecord> record =
      JobOwnerRecord::Create(options.socket_dir, options.shm_dir, job_id);
  if (record.ok()) {
    *owner_record = std::move(*record);
  } else if (record.status().code() != absl::StatusCode::kAlreadyExists) {
    return record.status();
  }
  std::string program = options.program;
  if (program.empty()) {
    ASSIGN_OR_RETURN(const std::string self, SelfDirectory());
    ASSIGN_OR_RETURN(program, FindSiblingProgram(self, "data_service", "--data_service"));
  } else if (!IsExecutableFile(program)) {
    return absl::NotFoundError(
        absl::StrCat("--data_service=", program, ": not an executable file on this node"));
  }
  ASSIGN_OR_RETURN(const std::string job_dir, MakeNodeJobDirectory(options.socket_dir, job_id));
  // On failure: the directory goes when no other node of the job on this machine uses it.
  auto remove_job_dir = absl::MakeCleanup([&job_dir] { RemoveJobDirectoryIfEmpty(job_dir); });
  struct stat info;
  if (lstat(socket_path.c_str(), &info) == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat(socket_path, " already exists: another job uses job id ", job_id,
                     ", or an earlier one did not clean up (remove it by hand if no job runs)"));
  }
  ASSIGN_OR_RETURN(
      std::vector<std::string> argv,
      BuildNodeDataServiceArgv(program, socket_path, job_id, rank.node_index, seed, options.args));
  // If this rank dies first, the service (told by PR_SET_PDEATHSIG) removes the job
  // directory (when empty) and the record too.
  argv.push_back("--remove_socket_dir=true");
  if (owner_record->has_value()) {
    argv.push_back(absl::StrCat("--owner_record=", (*owner_record)->path()));
  }
  ChildSpec spec;
  spec.name = absl::StrCat("data service of node ", rank.node_index);
  spec.program = program;
  spec.argv = std::move(argv);
  spec.parent_death_signal = SIGTERM;  // it removes its socket and segments
  spec.use_all_cpus = true;            // not only the CPUs this rank is bound to
  spec.ignore_sigpipe = true;          // its stderr is this rank's, a pipe to mpirun
  ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn(spec));
  const absl::Time start = absl::Now();
  absl::Status ready = AwaitAcceptingSocket(child, socket_path, options.ready_timeout);
  if (!ready.ok()) {
    if (!child.has_exited()) {
      absl::StatusOr<ExitStatus> ended = child.Terminate(options.shutdown_grace);
      (void)ended;
    }
    unlink(socket_path.c_str());  // the service's, made after the check above
    return ready;
  }
  std::move(remove_job_dir).Cancel();
  LogInfo("node %d: data service (pid %d) ready on %s after %s", rank.node_index, child.pid(),
          socket_path, absl::FormatDuration(absl::Now() - start));
  // Machine-readable twin of the line above: scripts and tests read the service's pid from it.
  LogInfo("pid_record role=data_service node=%d pid=%d socket=%s", rank.node_index, child.pid(),
          socket_path);
  return child;
}

// MPI_Barrier over `node` that gives up after `timeout`. On DeadlineExceeded the barrier is
// left pending: the caller ends the job.
absl::Status BarrierWithin(MPI_Comm node, absl::Duration timeout, int node_index) {
  MPI_Request request;
  RETURN_IF_MPI_ERROR(MPI_Ibarrier(node, &request));
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int done = 0;
    RETURN_IF_MPI_ERROR(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the ranks of node ", node_index, " did not all finish within ",
                       absl::FormatDuration(timeout),
                       " of this one: one of them stalled or failed (its log says which)"));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> BuildNodeDataServiceArgv(
    const std::string& program, const std::string& socket, const std::string& job_id,
    int node_index, uint64_t seed, const std::vector<std::string>& args) {
  RETURN_IF_ERROR(ValidateDataServiceArgs(args));
  const bool args_set_seed = std::any_of(args.begin(), args.end(), [](const std::string& arg) {
    return FlagNameOf(arg) == "data_seed";
  });
  std::vector<std::string> argv = {
      program,
      absl::StrCat("--socket=", socket),
      absl::StrCat("--job_id=", job_id),
      absl::StrCat("--node_id=", node_index),
  };
  if (!args_set_seed) argv.push_back(absl::StrCat("--data_seed=", seed));
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

absl::StatusOr<std::unique_ptr<NodeDataService>> NodeDataService::Start(
    const RankInfo& rank, MPI_Comm world, MPI_Comm node, const NodeDataServiceOptions& options) {
  // Note [Start-up and teardown deadlines] in launcher/rank/phase_deadline.h.
  RETURN_IF_ERROR(AwaitPhase(world, "node data services: the job id", options.startup_timeout));
  absl::optional<JobIdentity> agreed;
  std::vector<int> node_ranks(rank.local_size);
  {
    PhaseDeadline deadline("node data services: the job id (MPI_Bcast, MPI_Allgather)",
                           options.startup_timeout);
    ASSIGN_OR_RETURN(agreed, AgreeOnJob(rank, world, options));
    RETURN_IF_MPI_ERROR(MPI_Allgather(&rank.rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, node));
  }
  const JobIdentity identity = *agreed;
  const std::string job_id = identity.job_id;
  const std::string socket_path = NodeSocketPath(options.socket_dir, job_id, rank.node_index);
  std::unique_ptr<NodeDataService> service(new NodeDataService(
      rank, node, job_id, identity.seed, socket_path, std::move(node_ranks), options));

  NodeOutcome outcome;
  if (rank.local_rank == 0) {
    absl::StatusOr<ChildProcess> child =
        StartOnThisNode(rank, job_id, identity.seed, socket_path, options, &service->owner_record_);
    if (child.ok()) {
      service->child_ = std::move(*child);
      outcome.ok = 1;
    } else {
      CopyTruncated(child.status().ToString(), outcome.error);
    }
  }
  // Local rank 0 comes once its service is ready (or has failed to start).
  RETURN_IF_ERROR(AwaitPhase(node, "node data service: started by local rank 0",
                             options.ready_timeout + options.startup_timeout));
  {
    PhaseDeadline deadline("node data service: its outcome (MPI_Bcast)", options.startup_timeout);
    RETURN_IF_MPI_ERROR(MPI_Bcast(&outcome, sizeof(outcome), MPI_BYTE, 0, node));
  }
  if (!outcome.ok) {
    service->stopped_ = true;  // nothing to stop
    if (rank.local_rank == 0) return absl::UnavailableError(outcome.error);
    return absl::UnavailableError(absl::StrCat("the data service of node ", rank.node_index,
                                               " did not start (local rank 0 says: ", outcome.error,
                                               ")"));
  }
  return service;
}

NodeDataService::NodeDataService(const RankInfo& rank, MPI_Comm node, std::string job_id,
                                 uint64_t seed, std::string socket_path,
                                 std::vector<int> node_ranks, const NodeDataServiceOptions& options)
    : rank_(rank),
      node_(node),
      job_id_(std::move(job_id)),
      seed_(seed),
      socket_path_(std::move(socket_path)),
      node_ranks_(std::move(node_ranks)),
      socket_dir_(options.socket_dir),
      shm_dir_(options.shm_dir),
      shutdown_grace_(options.shutdown_grace),
      stop_timeout_(options.stop_timeout) {}

NodeDataService::~NodeDataService() {
  if (!child_.has_value()) return;
  if (!child_->has_exited()) {
    absl::StatusOr<ExitStatus> ended = child_->Terminate(shutdown_grace_);
    if (ended.ok() && !ended->success()) {
      LogWarning("%s %s after SIGTERM", child_->Describe(), ended->ToString());
    }
  }
  RemoveLeftovers();
}

pid_t NodeDataService::pid() const { return child_.has_value() ? child_->pid() : -1; }

absl::Status NodeDataService::Stop() {
  if (stopped_) return absl::FailedPreconditionError("the node's data service was stopped already");
  stopped_ = true;
  RETURN_IF_ERROR(BarrierWithin(node_, stop_timeout_, rank_.node_index));
  if (!child_.has_value()) return absl::OkStatus();
  const std::string name = child_->Describe();
  absl::StatusOr<ExitStatus> ended = child_->Terminate(shutdown_grace_);
  RemoveLeftovers();
  owner_record_.reset();  // the job's files on this node are gone
  if (!ended.ok()) return ended.status();
  if (!ended->success()) {
    return absl::InternalError(
        absl::StrCat(name, " ", ended->ToString(), " after SIGTERM (it should exit 0)"));
  }
  return absl::OkStatus();
}

void NodeDataService::RemoveLeftovers() {
  std::vector<std::string> paths = {socket_path_};
  // The data service's rings on this node, training and validation.
  for (int rank : node_ranks_) {
    for (const bool train : {true, false}) {
      paths.push_back(absl::StrCat(shm_dir_, RingSegmentName(job_id_, rank, train)));
    }
  }
  for (const std::string& path : paths) {
    if (unlink(path.c_str()) == 0) {
      LogWarning("removed leftover %s", path);
    } else if (errno != ENOENT) {
      LogWarning("cannot remove %s: %s", path, std::strerror(errno));
    }
  }
  // Note [Job directory of the nodes] in launcher/rank/job_files.h: the last node here removes it.
  RemoveJobDirectoryIfEmpty(JobDirectoryPath(socket_dir_, job_id_));
}

}  // namespace stoker::launcher
