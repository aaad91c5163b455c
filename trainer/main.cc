// The trainer program: one MPI rank, on its own GPU when the node has one (else the CPU).
// Flags describe the run (trainer/flags.h; --help lists them); the rank's life is
// trainer/trainer_rank.h. Exit codes are the table of common/exit_codes.h: 0 finished, 2
// bad flag, 65 bad data, 69 peer lost, 74 checkpoint I/O, 75 --stop_after_steps, 124
// timeout, 128+N stopped by signal N with a checkpoint, 1 any other failure. A failure's
// first error line names its cause and the rank.
#include <cstdio>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cuda_work_queues.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "trainer/flags.h"
#include "trainer/trainer_rank.h"

int main(int argc, char** argv) {
  namespace trainer = stoker::trainer;
  // Before any CUDA call: CUDA reads it when it makes the context.
  stoker::UseAllCudaWorkQueues();  // Note [Hardware work queues]
  stoker::SetLogIdentity("trainer");
  absl::StatusOr<trainer::TrainerCommandLine> command_line =
      trainer::ParseTrainerCommandLine(absl::MakeConstSpan(argv + 1, argc - 1));
  if (!command_line.ok()) {
    std::fprintf(stderr, "trainer: %s\nRun `trainer --help` for the flags.\n",
                 std::string(command_line.status().message()).c_str());
    return trainer::kExitUsage;
  }
  if (command_line->help) {
    std::fputs(trainer::TrainerFlagsHelp().c_str(), stdout);
    return trainer::kExitOk;
  }
  absl::StatusOr<int> exit_code = trainer::RunTrainerRank(
      &argc, &argv, std::move(command_line->options), command_line->node_data_service);
  if (!exit_code.ok()) return stoker::ReportFailure(exit_code.status());
  return *exit_code;
}
