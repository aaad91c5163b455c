// Rank setup for every trainer process: MPI start-up and the rank's place in the job
// (global rank, local rank on its node), taken from MPI itself so that it works under
// the launcher, a bare `mpirun` and `srun` alike.
#ifndef STOKER_TRAINER_RANK_SETUP_H_
#define STOKER_TRAINER_RANK_SETUP_H_

#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"

namespace stoker::trainer {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes of this node
  int local_size = 1;  // processes on this node
};

// Owns MPI for the life of the process: MPI_Init_thread in Create(), MPI_Finalize in the
// destructor. One per process. Every MPI call is made from the thread that created it
// (MPI_THREAD_FUNNELED is requested).
class MpiSession {
 public:
  static absl::StatusOr<std::unique_ptr<MpiSession>> Create(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  const RankInfo& info() const { return info_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }

  // Ends the whole job from this rank (MPI_Abort): the path for fatal errors after which
  // the other ranks could otherwise wait in a collective for ever.
  [[noreturn]] void Abort(int exit_code);

 private:
  MpiSession(RankInfo info, MPI_Comm node_comm) : info_(info), node_comm_(node_comm) {}
  RankInfo info_;
  MPI_Comm node_comm_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_RANK_SETUP_H_
