// LauncherOptions: what one `launcher` command line asks for (placement, programs, the
// job's timing, the data service's dataset flags, the trainers' own flags), as plain
// values; Validate() refuses, in the launcher's wording ("--flag must be ..."), what is
// wrong whatever the machine. Filled by launcher/flags.h; turned into a JobConfig, with
// what the environment adds, by launcher/command.h.
#ifndef STOKER_LAUNCHER_OPTIONS_H_
#define STOKER_LAUNCHER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::launcher {

// Where the trainers run and how they are started (--mode, --np, --hostfile, --hosts,
// --mpirun*, --srun*).
struct PlacementOptions {
  std::string mode = "auto";          // auto, local, hosts or slurm (ChooseLaunchMode)
  int ranks_per_node = 1;             // --np
  bool ranks_per_node_given = false;  // --np was set: the host modes and Slurm keep it
  std::string hostfile;
  std::string hosts;  // host:slots,host:slots
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;
  std::string srun = "srun";
  std::vector<std::string> srun_args;

  // InvalidArgument for an unknown --mode, or --hostfile with --hosts.
  absl::Status Validate() const;
};

// The data service's flags that the launcher sets (0 or empty: the service's default).
struct DatasetOptions {
  std::string dataset;
  std::string train_dir;
  std::string val_dir;
  int64_t synthetic_samples = 0;
  int synthetic_classes = 0;
  int threads = 0;                      // --data_threads
  int prefetch = 0;                     // --data_prefetch
  std::vector<std::string> extra_args;  // --data_service_args, split (ParseDataServiceArgs)
};

struct LauncherOptions {
  PlacementOptions placement;
  DatasetOptions data;
  std::string trainer;       // empty: next to the launcher (FindSiblingProgram)
  std::string data_service;  // empty: next to the launcher, or the trainers' default
  uint64_t seed = 0;
  std::string job_id;  // empty: GenerateJobId()
  absl::Duration ready_timeout = absl::Seconds(60);
  absl::Duration shutdown_grace = absl::Seconds(10);
  absl::Duration stop_grace = absl::Seconds(90);
  bool dry_run = false;
  // --trace: the directory every rank and data service writes its trace to, merged into
  // one file at the job's end (launcher/trace_merge.h); empty: off. --trace_steps: the
  // trainers' window ("A:B"; empty: theirs by default).
  std::string trace_dir;
  std::string trace_steps;
  std::vector<std::string> trainer_args;  // after `--`, passed to every trainer verbatim

  // InvalidArgument naming the flag at fault: the placement's, a bad --job_id, a
  // --ready_timeout that is not positive, a negative --shutdown_grace or --stop_grace.
  absl::Status Validate() const;
};

// The job's deadlines, checked once for the options and for a JobConfig (PlanJob):
// InvalidArgument unless --ready_timeout > 0 and --stop_grace, --shutdown_grace >= 0.
absl::Status ValidateJobDeadlines(absl::Duration ready_timeout, absl::Duration stop_grace,
                                  absl::Duration shutdown_grace);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_OPTIONS_H_
