// What the launcher's main() runs, by subcommand: `launcher doctor [flags]` checks the
// machine; `launcher [flags] -- [trainer flags]` turns LauncherOptions into a JobConfig
// (adding what the environment says: PATH, the Slurm allocation, STOKER_* settings, the
// programs next to the launcher), plans the job and runs it.
#ifndef STOKER_LAUNCHER_COMMAND_H_
#define STOKER_LAUNCHER_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launcher/job.h"
#include "launcher/options.h"

namespace stoker::launcher {

// Whether `args` (argv without argv[0]) is the doctor subcommand: `launcher doctor ...`.
bool IsDoctorCommand(const std::vector<std::string>& args);

// `launcher doctor` with `args` (after "doctor"): prints the report (or the usage error,
// or --help) and returns the exit code: 0, 1 when a check fails, 2 for a usage error.
int RunDoctorCommand(const std::vector<std::string>& args);

// Prints "launcher: <message>", the usage and a pointer to --help on stderr; returns
// kExitUsage.
int ReportUsageError(absl::string_view message);

// The job `options` ask for on this machine. `environment` is the process's NAME=VALUE
// entries: PATH finds bare program names, SLURM_* describe an allocation (--mode=auto,
// slurm), STOKER_* (and LD_LIBRARY_PATH off this machine) reach every rank. Reads
// --hostfile. InvalidArgument or NotFound naming the flag at fault.
absl::StatusOr<JobConfig> JobConfigFor(const LauncherOptions& options,
                                       const std::vector<std::string>& environment);

// Runs the planned job to its end: warns when the environment's NCCL_NVLS_ENABLE is
// overridden, notes a requeued Slurm job (SLURM_RESTART_COUNT), and logs how the job
// ended. Returns the job's exit code (JobResult).
int RunPlannedJob(const JobPlan& plan, const std::vector<std::string>& trainer_args);

// This process's environment as NAME=VALUE entries.
std::vector<std::string> ProcessEnvironment();

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_COMMAND_H_
