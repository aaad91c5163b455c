// The commands the launcher runs, as argv vectors built by pure functions from plain option
// structs: the data service's command line and the mpirun command line that starts the
// trainers, plus shell quoting to print either exactly as it will run.
#ifndef STOKER_LAUNCHER_LAUNCH_COMMAND_H_
#define STOKER_LAUNCHER_LAUNCH_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stoker::launcher {

// The environment variable that must reach every rank with the value "0": NVLink multicast
// (NVLS) stays off on the GPU hosts Stoker runs on.
inline constexpr char kNvlsEnableVariable[] = "NCCL_NVLS_ENABLE";

// How the trainer ranks are placed on machines. Only kLocal exists today; the cluster modes
// slot in as further enumerators, each adding its own fields to TrainerLaunch and its own
// branch in BuildTrainerArgv:
//   kHostfile  mpirun --hostfile <file> --map-by ppr:<ranks_per_node>:node
//   kHostList  mpirun -H host1:<n>,host2:<n>
//   kSlurm     srun --ntasks-per-node=<ranks_per_node> (no mpirun)
enum class LaunchMode {
  kLocal,  // All ranks on this machine: mpirun -np <ranks_per_node>.
};

// Everything the trainer command line depends on. Plain data; BuildTrainerArgv validates it.
struct TrainerLaunch {
  LaunchMode mode = LaunchMode::kLocal;
  std::string mpirun = "mpirun";  // argv[0] of the command, as the user named it
  int ranks_per_node = 1;         // --np
  // Passed to mpirun verbatim, after -np (--mpirun_args).
  std::vector<std::string> mpirun_args;
  // Names of environment variables every rank must see; each becomes `-x NAME` so that
  // remote ranks get them too (local ranks inherit mpirun's environment anyway).
  std::vector<std::string> exported_env;
  std::string trainer;      // path of the trainer program
  std::string data_socket;  // passed to every rank as --data_socket
  uint64_t seed = 0;        // passed to every rank as --seed
  // Passed to every rank verbatim after --data_socket and --seed (the launcher's args after
  // `--`). Must not set --data_socket or --seed themselves.
  std::vector<std::string> trainer_args;
};

// Returns `mpirun -np N [mpirun_args] -x NAME... <trainer> --data_socket=S --seed=N
// [trainer_args]`. InvalidArgument, naming the launcher flag at fault, when the options
// are inconsistent (no ranks, a conflicting -np in mpirun_args, --seed in trainer_args, a
// malformed variable name, ...).
absl::StatusOr<std::vector<std::string>> BuildTrainerArgv(const TrainerLaunch& launch);

// Everything the data service command line depends on. Zero or empty means "leave the data
// service's own default"; node_id and data_seed are always passed.
struct DataServiceLaunch {
  std::string program;  // path of the data_service program
  std::string socket;   // --socket
  std::string job_id;   // --job_id
  int node_id = 0;      // --node_id
  std::string dataset;  // --dataset: "", "synthetic" or "imagefolder"
  std::string train_dir;
  std::string val_dir;
  int64_t synthetic_samples = 0;
  int synthetic_classes = 0;
  uint64_t data_seed = 0;
  int threads = 0;   // --threads (the launcher's --data_threads)
  int prefetch = 0;  // --prefetch (the launcher's --data_prefetch)
};

// Returns `<program> --socket=S --job_id=ID --node_id=N --data_seed=S [--dataset=...]
// [...]`. InvalidArgument, naming the launcher flag at fault, on bad values.
absl::StatusOr<std::vector<std::string>> BuildDataServiceArgv(const DataServiceLaunch& launch);

// Quotes `word` for a POSIX shell: unchanged when it holds only characters no shell
// treats specially, otherwise in single quotes.
std::string ShellQuote(absl::string_view word);

// Formats a command as a shell would run it: `NAME=VALUE ... argv...`, every word quoted.
std::string FormatCommand(absl::Span<const std::string> env, absl::Span<const std::string> argv);

// Returns true when `name` is a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*).
bool IsEnvironmentName(absl::string_view name);

// Returns the names of the variables in `environ`-style `NAME=VALUE` entries whose name
// starts with `prefix`, in their order there.
std::vector<std::string> EnvironmentNamesWithPrefix(absl::Span<const std::string> environment,
                                                    absl::string_view prefix);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_LAUNCH_COMMAND_H_
