// launcher: runs one Stoker training job. `launcher [flags] -- [trainer flags]` runs the
// trainers on this machine under mpirun (after starting the data service and waiting until
// it is ready), on several hosts under mpirun (--hostfile, --hosts), or under srun inside a
// Slurm allocation, and cleans up (and, with --trace, merges the job's trace at its end).
// `launcher doctor [flags]` checks the machine; `launcher trace merge DIR` merges the traces
// of a job run with --trace=DIR (launcher/trace_merge.h). Flags: launcher/flags.h (--help
// lists them); what runs: launcher/command.h.
// Exit codes are the table of common/exit_codes.h: 0 on success, 2 for usage errors, 128 +
// signal when stopped by SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 (143 for SIGTERM, 138 for
// SIGUSR1), else the first failure's code (Note [Exit code of a job] in launcher/job.cc);
// doctor and trace merge: 1 when a check or the merge fails.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/logging.h"
#include "launcher/command.h"
#include "launcher/flags.h"
#include "launcher/job.h"
#include "launcher/trace_merge.h"

int main(int argc, char** argv) {
  namespace launcher = stoker::launcher;
  stoker::SetLogIdentity("launcher");
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (launcher::IsDoctorCommand(args)) {
    return launcher::RunDoctorCommand(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (launcher::IsTraceCommand(args)) {
    return launcher::RunTraceCommand(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  absl::StatusOr<launcher::LauncherCommandLine> command_line =
      launcher::ParseLauncherCommandLine(args);
  if (!command_line.ok()) return launcher::ReportUsageError(command_line.status().message());
  if (command_line->help) {
    std::fputs(launcher::LauncherHelp().c_str(), stdout);
    return 0;
  }
  const launcher::LauncherOptions& options = command_line->options;

  absl::StatusOr<launcher::JobConfig> config =
      launcher::JobConfigFor(options, launcher::ProcessEnvironment());
  if (!config.ok()) return launcher::ReportUsageError(config.status().message());
  absl::StatusOr<launcher::JobPlan> plan = launcher::PlanJob(*config);
  if (!plan.ok()) return launcher::ReportUsageError(plan.status().message());
  if (options.dry_run) {
    std::fputs(launcher::FormatPlan(*plan).c_str(), stdout);
    return 0;
  }
  const int exit_code = launcher::RunPlannedJob(*plan, options.trainer_args);
  if (!options.trace_dir.empty()) {
    // What the job traced, on one clock in one file, also when it failed part-way.
    const int merged = launcher::RunTraceCommand({"merge", options.trace_dir});
    if (exit_code == 0 && merged != 0) return merged;
  }
  return exit_code;
}
