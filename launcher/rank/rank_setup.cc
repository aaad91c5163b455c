#include "launcher/rank/rank_setup.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/mpi_status.h"
#include "common/status_macros.h"
#include "launcher/rank/phase_deadline.h"

namespace stoker::launcher {

absl::StatusOr<RankInfo> ComputeRankInfo(MPI_Comm world, const RankSetupOptions& options,
                                         MPI_Comm* node_comm) {
  if (options.ranks_per_node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks_per_node must be >= 0 (got ", options.ranks_per_node, ")"));
  }
  RankInfo info;
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(world, &info.rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(world, &info.world_size));
  MPI_Comm node;
  if (options.ranks_per_node > 0) {
    // Note [Forced node split].
    RETURN_IF_MPI_ERROR(
        MPI_Comm_split(world, info.rank / options.ranks_per_node, info.rank, &node));
  } else {
    RETURN_IF_MPI_ERROR(
        MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node));
  }
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(node, &info.local_rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(node, &info.local_size));

  // The nodes' local ranks 0, ordered by global rank (the key), number the nodes.
  MPI_Comm leaders;
  RETURN_IF_MPI_ERROR(
      MPI_Comm_split(world, info.local_rank == 0 ? 0 : MPI_UNDEFINED, info.rank, &leaders));
  int node_index_and_count[2] = {0, 0};
  if (info.local_rank == 0) {
    RETURN_IF_MPI_ERROR(MPI_Comm_rank(leaders, &node_index_and_count[0]));
    RETURN_IF_MPI_ERROR(MPI_Comm_size(leaders, &node_index_and_count[1]));
    MPI_Comm_free(&leaders);
  }
  RETURN_IF_MPI_ERROR(MPI_Bcast(node_index_and_count, 2, MPI_INT, 0, node));
  info.node_index = node_index_and_count[0];
  info.node_count = node_index_and_count[1];
  *node_comm = node;
  return info;
}

absl::StatusOr<std::unique_ptr<MpiSession>> MpiSession::Create(int* argc, char*** argv,
                                                               const RankSetupOptions& options) {
  int initialized = 0;
  RETURN_IF_MPI_ERROR(MPI_Initialized(&initialized));
  if (initialized) return absl::FailedPreconditionError("MPI is already initialized");
  // A rank must not outlive the process that started it (mpirun's daemon, srun's
  // step daemon): if that one dies, so does this rank, instead of waiting in a
  // collective for ever.
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) std::_Exit(1);  // the parent died before prctl took effect
  int provided = 0;
  RETURN_IF_MPI_ERROR(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as return codes so that they become Status values.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (options.before_rank_setup) {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    options.before_rank_setup(world_rank);
  }
  // Note [Start-up and teardown deadlines] in launcher/rank/phase_deadline.h.
  if (absl::Status arrived = AwaitPhase(MPI_COMM_WORLD, "MPI rank setup", options.startup_timeout);
      !arrived.ok()) {
    return arrived;
  }
  MPI_Comm node_comm;
  absl::StatusOr<RankInfo> info;
  {
    PhaseDeadline deadline("MPI rank setup (the node communicators)", options.startup_timeout);
    info = ComputeRankInfo(MPI_COMM_WORLD, options, &node_comm);
  }
  if (!info.ok()) {
    MPI_Finalize();
    return info.status();
  }
  return std::unique_ptr<MpiSession>(new MpiSession(*info, node_comm, options.finalize_timeout));
}

MpiSession::~MpiSession() {
  MPI_Comm_free(&node_comm_);
  // Note [Bounded MPI_Finalize].
  absl::Notification finalized;
  std::thread deadline([this, &finalized] {
    if (finalized.WaitForNotificationWithTimeout(finalize_timeout_)) return;
    LogError(
        "%s (exit %d): MPI_Finalize did not return within %s: another rank stalled or "
        "died at the end of the job; exiting so that mpirun ends it",
        ExitCause(kExitTimeout), kExitTimeout, absl::FormatDuration(finalize_timeout_));
    std::fflush(stderr);
    std::_Exit(kExitTimeout);
  });
  MPI_Finalize();
  finalized.Notify();
  deadline.join();
}

void MpiSession::Abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

absl::StatusOr<int> GpuForLocalRank(const RankInfo& rank, int visible_gpus,
                                    const std::string& visible_devices) {
  if (visible_gpus <= 0) return -1;
  if (rank.local_size > visible_gpus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank.rank, " (local rank ", rank.local_rank, " on node ", rank.node_index,
        "): ", rank.local_size, " ranks on this node but only ", visible_gpus, " GPU(s) visible",
        visible_devices.empty() ? ""
                                : absl::StrCat(" (CUDA_VISIBLE_DEVICES=", visible_devices, ")"),
        "; start at most one rank per GPU, and let every rank see all of the node's GPUs "
        "(local rank i trains on GPU i; under Slurm use --gpu-bind=none)"));
  }
  return rank.local_rank;
}

}  // namespace stoker::launcher
