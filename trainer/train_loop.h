// RunTraining: one rank's training run. It trains epoch after epoch on the batches of its
// RunInput (forward under autocast on the GPU, backward with gradients averaged across
// ranks while it runs, accumulation, clipping, the optimizer at the schedule's learning
// rate), validates, checkpoints and resumes, stops together with the other ranks on a stop
// signal, and reports (trainer/report/run_reporter.h).
#ifndef STOKER_TRAINER_TRAIN_LOOP_H_
#define STOKER_TRAINER_TRAIN_LOOP_H_

#include <string>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"
#include "trainer/options.h"
#include "trainer/run_context.h"
#include "trainer/run_input.h"

namespace stoker::trainer {

// How a run that did not fail ended.
struct TrainingOutcome {
  enum class End { kFinished, kStopSignal, kStopAfterSteps };
  End end = End::kFinished;
  int signal = 0;          // kStopSignal: the signal number
  std::string checkpoint;  // the checkpoint written on the way out; empty if none
};

// The process exit code for `outcome` (kExitOk, ExitCodeForSignal, kExitStoppedEarly).
int ExitCodeFor(const TrainingOutcome& outcome);

// Runs the whole training. `gradients` reduces gradients (device memory on the GPU path);
// `host` carries the control decisions (seed, resume state, stop votes, validation counts)
// in host memory; the two may be the same object on the CPU. `open_input` makes the run's
// input once its start position is known (OpenRunInput by default). Every collective gets
// a deadline (the collective watchdog). A libtorch error anywhere comes back as a Status.
// Must be called on every rank with the same options; every collective it makes is in the
// same order on every rank.
absl::StatusOr<TrainingOutcome> RunTraining(const TrainerOptions& options,
                                            const RunContext& context, Communicator& gradients,
                                            Communicator& host,
                                            RunInputFactory open_input = nullptr);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAIN_LOOP_H_
