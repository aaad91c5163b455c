// The data service of one node, started from inside the job by the node's local rank 0 when
// no launcher can start it (several hosts under mpirun, srun, or a bare `mpirun trainer`):
// //launcher/rank:node_data_service, called by the trainer right after MPI start-up.
#ifndef STOKER_LAUNCHER_RANK_NODE_DATA_SERVICE_H_
#define STOKER_LAUNCHER_RANK_NODE_DATA_SERVICE_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "launcher/rank/child_process.h"
#include "launcher/rank/job_owner.h"
#include "launcher/rank/rank_setup.h"

namespace stoker::launcher {

// Note [Data service per node]
// In the cluster modes the launcher runs on one machine and cannot start processes on the
// others, so each node's data service is started from inside the job. Right after MPI
// start-up every rank calls NodeDataService::Start, which
//  1. agrees on the job id and the base seed: rank 0's values (its job id, or a fresh
//     GenerateJobId() when it has none), broadcast over the world;
//  2. on the node's local rank 0: makes the job directory (0700) or checks the one there,
//     spawns data_service with --socket=<NodeSocketPath> --remove_socket_dir,
//     --job_id, --node_id=<node index>, --data_seed=<seed> and the pass-through args, with
//     SIGTERM as its parent-death signal and every CPU of the node allowed, and waits until
//     the socket accepts connections (failing if the service exits first or the timeout
//     passes);
//  3. broadcasts the outcome over the node, so that the other local ranks connect only once
//     the service is up, and fail with local rank 0's message when it is not.
// Each side notices the other's death: a rank whose data service died gets Unavailable
// from its ring; a data service whose local rank 0 died gets SIGTERM (PR_SET_PDEATHSIG)
// and removes its socket and segments on the way out. Stop() ends it in order: a barrier
// on the node (no local rank reads from it any more), then SIGTERM, which it must answer
// by exiting 0. The socket is <socket_dir>/stoker.<job_id>/node<N>.sock, in the job
// directory local rank 0 makes or finds (Note [Job directory of the nodes] in
// launcher/rank/job_files.h); the service is started with --remove_socket_dir, so that it removes
// the directory after its socket when local rank 0 died first, and nothing is left.
// When local rank 0 and its data service die together (both SIGKILLed, the node's OOM
// killer), neither can clean up. So unless a live launcher owns the job on this machine,
// local rank 0 holds the job's owner record (Note [Stale jobs] in launcher/rank/job_owner.h)
// from before it starts the service until the service and its files are gone; the next
// job started on the node finds the record's owner gone and removes what is left.

struct NodeDataServiceOptions {
  // The data_service program; empty: `data_service` next to this program, or
  // ../data_service/data_service (the bazel-bin layout). Only local ranks 0 look it up.
  std::string program;
  // The job id, naming the socket and segments. Rank 0's value counts; empty on rank 0: it
  // makes one (GenerateJobId).
  std::string job_id;
  // Rank 0's value counts: every node's --data_seed (unless `args` sets --data_seed), so
  // that every node sees the same dataset.
  uint64_t seed = 0;
  // More data service flags, passed verbatim (--dataset, --train_dir, --threads, ...): the
  // trainer's --data_service_args, parsed by ParseDataServiceArgs
  // (launcher/rank/data_service_args.h). Must not set --socket, --job_id or --node_id.
  std::vector<std::string> args;
  std::string socket_dir = "/tmp";
  std::string shm_dir = "/dev/shm";
  absl::Duration ready_timeout = absl::Seconds(60);
  absl::Duration shutdown_grace = absl::Seconds(10);
  // How long Stop() waits for the other local ranks to reach it (a rank that stalls at the
  // end of training must not keep its node waiting for ever).
  absl::Duration stop_timeout = absl::Seconds(300);
  // How long Start()'s collectives wait for the slowest rank, beyond ready_timeout for the
  // node's local rank 0, which starts the service (Note [Start-up and teardown deadlines]
  // in launcher/rank/phase_deadline.h).
  absl::Duration startup_timeout = absl::Seconds(300);
};

// Returns `<program> --socket=S --job_id=J --node_id=N [--data_seed=SEED] args...`
// (--data_seed only when `args` does not set it). InvalidArgument, naming
// --data_service_args, when `args` fails ValidateDataServiceArgs.
absl::StatusOr<std::vector<std::string>> BuildNodeDataServiceArgv(
    const std::string& program, const std::string& socket, const std::string& job_id,
    int node_index, uint64_t seed, const std::vector<std::string>& args);

// One node's data service as seen from one rank: local rank 0 owns the process, every local
// rank knows its socket. Not thread-safe; every call is made from the rank's MPI thread.
//
//   ASSIGN_OR_RETURN(auto service, NodeDataService::Start(session.info(), session.world(),
//                                                         session.node(), options));
//   ... RingClient::Connect(service->socket_path(), ...) ... train ...
//   RETURN_IF_ERROR(service->Stop());
class NodeDataService {
 public:
  // Steps 1 to 3 of Note [Data service per node]. Collective over `world` (and `node`, the
  // node communicator of `rank`): must be called in the same order on every rank.
  static absl::StatusOr<std::unique_ptr<NodeDataService>> Start(
      const RankInfo& rank, MPI_Comm world, MPI_Comm node, const NodeDataServiceOptions& options);

  // Without Stop(): local rank 0 ends the service (SIGTERM, SIGKILL after the grace period)
  // and removes what it left. No collective.
  ~NodeDataService();
  NodeDataService(const NodeDataService&) = delete;
  NodeDataService& operator=(const NodeDataService&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  const std::string& job_id() const { return job_id_; }
  uint64_t seed() const { return seed_; }
  // The data service's pid on local rank 0; -1 elsewhere.
  pid_t pid() const;

  // Waits until every local rank has called Stop (so none reads from the service any more),
  // then local rank 0 sends SIGTERM and waits for the service to exit. Internal when it
  // does not exit 0; DeadlineExceeded when the other local ranks have not all called Stop
  // within options.stop_timeout (the caller then ends the job; the destructor still ends
  // the service). Collective over the node. FailedPrecondition on a second call.
  absl::Status Stop();

 private:
  NodeDataService(const RankInfo& rank, MPI_Comm node, std::string job_id, uint64_t seed,
                  std::string socket_path, std::vector<int> node_ranks,
                  const NodeDataServiceOptions& options);
  // Local rank 0: removes the socket and the node's ranks' ring segments if the service
  // left them, logging each one, then the job directory when that leaves it empty.
  void RemoveLeftovers();

  RankInfo rank_;
  MPI_Comm node_;
  std::string job_id_;
  uint64_t seed_;
  std::string socket_path_;
  std::vector<int> node_ranks_;  // global ranks of this node's ranks
  std::string socket_dir_;
  std::string shm_dir_;
  absl::Duration shutdown_grace_;
  absl::Duration stop_timeout_;
  bool stopped_ = false;
  // Local rank 0 only. Declared before child_: destroyed after it, the record goes last.
  absl::optional<JobOwnerRecord> owner_record_;
  absl::optional<ChildProcess> child_;
};

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_NODE_DATA_SERVICE_H_
