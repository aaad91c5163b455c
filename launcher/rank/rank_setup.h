// Rank setup for every trainer process: MPI start-up and the rank's place in the job
// (global rank, local rank on its node, the node's index), taken from MPI itself so that it
// works under the launcher, a bare `mpirun` and `srun` alike; and the choice of the GPU a
// rank trains on. This is the launcher's library inside every rank (//launcher/rank:rank_setup).
#ifndef STOKER_LAUNCHER_RANK_RANK_SETUP_H_
#define STOKER_LAUNCHER_RANK_RANK_SETUP_H_

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace stoker::launcher {

// Where one rank sits in the job. Plain data, the same on every call.
struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes of this node
  int local_size = 1;  // processes on this node
  // The node's index: nodes are numbered 0..node_count-1 in the order of the global ranks of
  // their local rank 0 (so node 0 holds rank 0).
  int node_index = 0;
  int node_count = 1;
};

// How ranks are grouped into nodes.
struct RankSetupOptions {
  // 0: a node is a set of ranks that can share memory (MPI_COMM_TYPE_SHARED), i.e. a host.
  // N > 0: ranks [k*N, (k+1)*N) form node k, whatever host they run on (Note [Forced node
  // split]).
  int ranks_per_node = 0;
  // How long MPI_Finalize may take (Note [Bounded MPI_Finalize]).
  absl::Duration finalize_timeout = absl::Seconds(300);
  // How long the rank-setup collectives may wait for the slowest rank (Note [Start-up and
  // teardown deadlines] in launcher/rank/phase_deadline.h).
  absl::Duration startup_timeout = absl::Seconds(300);
  // A fault seam for tests: runs on every rank after MPI_Init, before the rank-setup
  // collectives (with this rank's rank in MPI_COMM_WORLD).
  std::function<void(int world_rank)> before_rank_setup;
};

// Note [Bounded MPI_Finalize]
// MPI_Finalize waits for every rank of the job (Open MPI fences), so one rank that stalls or
// hangs after the last collective keeps all the others in it for ever. Past
// finalize_timeout the waiting rank logs that and exits 124 (kExitTimeout); mpirun then ends
// the job, the stalled rank included (checked by //tests:fault_finalize_stall_test).

// Note [Forced node split]
// With ranks_per_node = N the node split ignores the hardware and groups consecutive global
// ranks by N. It exists for testing several "nodes" on one machine (each with its own data
// service, as on a real cluster) and for hosts whose MPI reports more ranks as sharing
// memory than should share a data service. Every rank must be given the same N. The trainer
// exposes it as --ranks_per_node.

// Computes this rank's RankInfo in `world` and creates the communicator of its node
// (returned through `node_comm`; the caller frees it). Collective over `world`: must be
// called in the same order on every rank. InvalidArgument for a negative ranks_per_node.
absl::StatusOr<RankInfo> ComputeRankInfo(MPI_Comm world, const RankSetupOptions& options,
                                         MPI_Comm* node_comm);

// Owns MPI for the life of the process: MPI_Init_thread in Create(), MPI_Finalize in the
// destructor, bounded by RankSetupOptions::finalize_timeout. One per process. Every MPI call is
// made from the thread that created it (MPI_THREAD_FUNNELED is requested). Not thread-safe.
class MpiSession {
 public:
  // Starts MPI and sets the rank up. Also ties this process to its parent: if the process
  // that started the rank (mpirun's daemon, srun's step daemon) dies, so does the rank.
  // FailedPrecondition when MPI is already initialized. DeadlineExceeded, naming the ranks
  // that did not come, when the rank setup did not begin on every rank within
  // options.startup_timeout; then MPI is left unfinalized (MPI_Finalize would wait for
  // those ranks), so that the process's exit ends the job.
  static absl::StatusOr<std::unique_ptr<MpiSession>> Create(int* argc, char*** argv,
                                                            const RankSetupOptions& options = {});
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  const RankInfo& info() const { return info_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  // The ranks of this node (see RankSetupOptions), ordered by global rank.
  MPI_Comm node() const { return node_comm_; }

  // Ends the whole job from this rank (MPI_Abort): the path for fatal errors after which
  // the other ranks could otherwise wait in a collective for ever.
  [[noreturn]] void Abort(int exit_code);

 private:
  MpiSession(RankInfo info, MPI_Comm node_comm, absl::Duration finalize_timeout)
      : info_(info), node_comm_(node_comm), finalize_timeout_(finalize_timeout) {}
  RankInfo info_;
  MPI_Comm node_comm_;
  absl::Duration finalize_timeout_;
};

// The GPU a rank trains on: one GPU per local rank, local rank i on GPU i. Returns -1 when
// no GPU is visible (the rank trains on the CPU). FailedPrecondition, naming the rank and
// both counts, when the node has more local ranks than this rank sees GPUs.
// `visible_devices` is the rank's CUDA_VISIBLE_DEVICES (for the message; may be empty).
absl::StatusOr<int> GpuForLocalRank(const RankInfo& rank, int visible_gpus,
                                    const std::string& visible_devices);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_RANK_SETUP_H_
