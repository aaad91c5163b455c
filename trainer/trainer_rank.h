// RunTrainerRank: one trainer rank's life after its flags are parsed. It starts MPI (and
// the rank setup: node, local rank), installs the stop-signal and truncated-ring handlers,
// has each node's local rank 0 start the node's data service when there is no
// --data_socket (Note [Data service per node] in launcher/rank/node_data_service.h),
// binds the rank to its GPU, makes the gradient (NCCL on GPUs) and control (MPI)
// communicators, trains, and stops the node's data service.
#ifndef STOKER_TRAINER_TRAINER_RANK_H_
#define STOKER_TRAINER_TRAINER_RANK_H_

#include "absl/status/statusor.h"
#include "trainer/flags.h"
#include "trainer/options.h"

namespace stoker::trainer {

// Runs this process's rank of the job. `argc`/`argv` go to MPI_Init. Returns the exit code
// of a run that ended (ExitCodeFor: finished, stopped by a signal, --stop_after_steps), or
// the failure of MPI's start-up, before any rank could be told. A failure after that is
// reported here and ends the whole job with MPI_Abort and its exit code (the other ranks
// may be waiting in a collective), after local rank 0 has stopped the node's data service.
// Call once per process, from main().
absl::StatusOr<int> RunTrainerRank(int* argc, char*** argv, TrainerOptions options,
                                   const NodeDataServiceFlags& node_data_service);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAINER_RANK_H_
