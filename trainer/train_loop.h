// TrainLoop: one rank's training run. It pulls batches from its data-service ring through
// a BatchFeeder, trains (forward under autocast on the GPU, backward with gradients
// averaged across ranks while it runs, accumulation, clipping, the optimizer at the
// schedule's learning rate), validates on the validation ring, checkpoints and resumes,
// stops together with the other ranks on SIGINT/SIGTERM, and reports (rank 0): progress
// lines, JSON lines, TensorBoard scalars, a summary, the exported weights.
#ifndef STOKER_TRAINER_TRAIN_LOOP_H_
#define STOKER_TRAINER_TRAIN_LOOP_H_

#include <string>

#include "absl/status/statusor.h"
#include "launcher/rank_setup.h"
#include "trainer/comm/communicator.h"
#include "trainer/options.h"

namespace stoker::trainer {

// How a run that did not fail ended.
struct TrainingOutcome {
  enum class End { kFinished, kStopSignal, kStopAfterSteps };
  End end = End::kFinished;
  int signal = 0;          // kStopSignal: SIGINT or SIGTERM
  std::string checkpoint;  // the checkpoint written on the way out; empty if none
};

// The process exit code for `outcome` (kExitOk, ExitCodeForSignal, kExitStoppedEarly).
int ExitCodeFor(const TrainingOutcome& outcome);

// Runs the whole training. `communicator` reduces gradients (device memory on the GPU
// path); `host_communicator` carries the control decisions (seed, resume state, stop
// votes, validation counts) in host memory. The two may be the same object on the CPU.
// Must be called on every rank with the same options; every collective it makes is in the
// same order on every rank.
absl::StatusOr<TrainingOutcome> RunTraining(const TrainerOptions& options, const launcher::RankInfo& rank,
                                            Communicator& communicator, Communicator& host_communicator);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAIN_LOOP_H_
