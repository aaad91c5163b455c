// Graceful stop on SIGINT, SIGTERM (what Slurm sends before it preempts or cancels a job),
// SIGUSR1 and SIGUSR2 (what `sbatch --signal=USR2@120` sends before the time limit, and
// what mpirun forwards to the ranks at once, unlike SIGTERM): the handler only records the
// signal; the training loop polls it at every step boundary, the ranks agree on it with a
// collective, and all of them stop after the same step, checkpoint and exit with
// ExitCodeForSignal. A second signal of the same kind is not caught: the process dies of it
// at once.
#ifndef STOKER_TRAINER_STOP_SIGNAL_H_
#define STOKER_TRAINER_STOP_SIGNAL_H_

#include "absl/status/status.h"

namespace stoker::trainer {

// Installs the handlers for SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 (with SA_RESTART). Call once from
// main(), after MPI start-up (so that no library replaces them). Internal if sigaction fails.
absl::Status InstallStopSignalHandlers();

// The first stop signal received, or 0. Async-signal-safe; thread-safe.
int StopSignalReceived();

// Test seam: behaves as if `signal_number` had arrived (0 clears).
void SetStopSignalForTest(int signal_number);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_STOP_SIGNAL_H_
