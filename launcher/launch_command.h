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
#include "launcher/placement.h"

namespace stoker::launcher {

// The environment variable that must reach every rank with the value "0": NVLink multicast
// (NVLS) stays off on the GPU hosts Stoker runs on.
inline constexpr char kNvlsEnableVariable[] = "NCCL_NVLS_ENABLE";

// Everything the trainer command line depends on. Plain data; BuildTrainerArgv validates it.
struct TrainerLaunch {
  LaunchMode mode = LaunchMode::kLocal;
  std::string mpirun = "mpirun";  // argv[0] in the mpirun modes, as the user named it
  std::string srun = "srun";      // argv[0] in kSlurm
  // Ranks on each node. kLocal and kSlurm: >= 1. kHostfile/kHostList: 0 means each host's
  // slots (every host must state them); N > 0 means N on every host (--map-by ppr:N:node).
  int ranks_per_node = 1;
  std::vector<HostSlots> hosts;  // kHostfile (as read from the file) and kHostList
  std::string hostfile;          // kHostfile
  int slurm_nodes = 0;           // kSlurm: the allocation's node count
  bool slurm_gpus = false;       // kSlurm: the allocation has GPUs (adds --gpu-bind=none)
  int slurm_cpus_per_task = 0;   // kSlurm: > 0 adds --cpus-per-task (srun does not inherit it)
  // Passed to mpirun (after its placement options) or srun verbatim (--mpirun_args,
  // --srun_args).
  std::vector<std::string> mpirun_args;
  std::vector<std::string> srun_args;
  // Names of environment variables every rank must see; each becomes `-x NAME` so that
  // remote ranks get them too (local ranks inherit mpirun's environment anyway). srun
  // passes the whole environment (--export=ALL).
  std::vector<std::string> exported_env;
  std::string trainer;      // path of the trainer program (the same path on every host)
  std::string data_socket;  // kLocal: passed to every rank as --data_socket
  // The cluster modes (each node's local rank 0 starts its data service, Note [Data
  // service per node] in launcher/rank/node_data_service.h): passed to every rank as --job_id,
  // --data_service (when set) and --data_service_args (joined with spaces).
  std::string job_id;
  std::string data_service;
  std::vector<std::string> data_service_args;
  uint64_t seed = 0;  // passed to every rank as --seed
  // Passed to every rank verbatim after the flags above (the launcher's args after `--`).
  // Must not set the flags the launcher sets.
  std::vector<std::string> trainer_args;
};

// Returns the command that starts every trainer rank:
//   kLocal     mpirun -np N [mpirun_args] -x NAME... <trainer> --data_socket=S --seed=N ...
//   kHostfile  mpirun -np T --hostfile F [--map-by ppr:N:node] [mpirun_args] -x NAME...
//              <trainer> --job_id=J --seed=N [--data_service=P] --data_service_args=A ...
//   kHostList  mpirun -np T -H h1:n,h2:n [--map-by ppr:N:node] ... (as kHostfile)
//   kSlurm     srun --nodes=K --ntasks=T --ntasks-per-node=N --kill-on-bad-exit=1
//              --export=ALL [--cpus-per-task=C] [--gpu-bind=none] [srun_args] <trainer>
//              --job_id=J ... (as above)
// followed by trainer_args. InvalidArgument, naming the launcher flag at fault, when the
// options are inconsistent (no ranks, a rank count in mpirun_args, --seed in trainer_args,
// a host with fewer slots than ranks, a malformed variable name, ...).
absl::StatusOr<std::vector<std::string>> BuildTrainerArgv(const TrainerLaunch& launch);

// Everything the data service command line depends on. Zero or empty means "leave the data
// service's own default"; node_id and data_seed are always passed.
struct DataServiceLaunch {
  std::string program;    // path of the data_service program
  std::string socket;     // --socket
  std::string job_id;     // --job_id
  int node_id = 0;        // --node_id
  std::string dataset;    // --dataset: "", "synthetic", "imagefolder" or "packed"
  std::string train_dir;  // a folder (imagefolder) or a packed index file (packed)
  std::string val_dir;
  int64_t synthetic_samples = 0;
  int synthetic_classes = 0;
  uint64_t data_seed = 0;
  int threads = 0;   // --threads (the launcher's --data_threads)
  int prefetch = 0;  // --prefetch (the launcher's --data_prefetch)
  // The launcher's --data_service_args (launcher/rank/data_service_args.h): passed verbatim
  // after every flag above, so that where they set the same flag, these win.
  std::vector<std::string> extra_args;
};

// Returns `<program> --socket=S --job_id=ID --node_id=N --data_seed=S [--dataset=...]
// [...] [extra_args...]`. InvalidArgument, naming the launcher flag at fault, on bad values.
absl::StatusOr<std::vector<std::string>> BuildDataServiceArgv(const DataServiceLaunch& launch);

// Only the dataset and pool options of `launch` (`--dataset=...`, `--train_dir=...`,
// `--threads=...`, ...; no socket, job id, node id or seed), then its extra_args: what the
// cluster modes hand to each node's data service through the trainers'
// --data_service_args. Validated as in BuildDataServiceArgv (program, socket and job id
// are not needed); extra_args by ValidateDataServiceArgs.
absl::StatusOr<std::vector<std::string>> DataServiceDatasetArgs(const DataServiceLaunch& launch);

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
