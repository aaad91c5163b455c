// RunContext: the facts of the process a run trains in, decided by main() before training
// starts (which rank it is, where its node is, whether it trains on a GPU), apart from what
// the user asked for (TrainerOptions).
#ifndef STOKER_TRAINER_RUN_CONTEXT_H_
#define STOKER_TRAINER_RUN_CONTEXT_H_

#include <mpi.h>

#include <string>

#include "launcher/rank/rank_setup.h"

namespace stoker::trainer {

struct RunContext {
  launcher::RankInfo rank;
  bool use_cuda = false;  // this rank trains on GPU `cuda_device`; else on the CPU
  int cuda_device = 0;
  // The job's id when it has one (the launcher's or rank 0's --job_id), for the names of
  // what the run puts in /dev/shm; empty otherwise.
  std::string job_id;
  // The job's MPI communicator, for the trace's clock pings (trainer/traced_steps.h);
  // MPI_COMM_NULL in a run without MPI (in-process tests): its clock is taken as rank 0's.
  MPI_Comm world = MPI_COMM_NULL;

  bool rank0() const { return rank.rank == 0; }
  int world_size() const { return rank.world_size; }
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_RUN_CONTEXT_H_
