// Where the ranks of a job go: this machine, a list of hosts (`--hosts=h1:4,h2:4` or a
// hostfile), or the Slurm allocation the launcher runs in. Pure functions over text and an
// injected environment map, so that every case is testable without hosts or Slurm.
#ifndef STOKER_LAUNCHER_PLACEMENT_H_
#define STOKER_LAUNCHER_PLACEMENT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace stoker::launcher {

// How the trainer ranks are started.
enum class LaunchMode {
  kLocal,     // all ranks on this machine under mpirun; the launcher runs the data service
  kHostfile,  // mpirun --hostfile FILE; each node's local rank 0 runs its data service
  kHostList,  // mpirun -H h1:n,h2:n; likewise
  kSlurm,     // srun inside the current allocation; likewise
};

// "local", "hostfile", "hosts", "slurm".
absl::string_view LaunchModeName(LaunchMode mode);

// One host of a host list or hostfile. Plain data.
struct HostSlots {
  std::string host;
  int slots = 0;  // 0: not stated
};

// Parses `--hosts`: comma-separated `host` or `host:slots`, e.g. "gpu1:8,gpu2:8".
// InvalidArgument naming --hosts on an empty list, an empty host, a bad slot count or a host
// named twice.
absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view hosts);

// Parses an Open MPI hostfile: one host a line, optionally `slots=N` (also `max_slots=N`,
// ignored); '#' starts a comment. InvalidArgument naming `path` and the line on a bad line,
// a host named twice, or a file without hosts.
absl::StatusOr<std::vector<HostSlots>> ParseHostfile(absl::string_view text,
                                                     absl::string_view path);

// The Slurm allocation the launcher runs in, from its SLURM_* variables.
struct SlurmAllocation {
  std::string job_id;      // SLURM_JOB_ID
  int nodes = 0;           // SLURM_JOB_NUM_NODES (or SLURM_NNODES)
  int tasks_per_node = 0;  // SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE; 0: not stated
  int gpus_per_node = 0;   // SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE / SLURM_JOB_GPUS; 0: none
  // SLURM_CPUS_PER_TASK; 0: not stated. srun does not inherit it (Slurm >= 22.05), so the
  // launcher passes it on.
  int cpus_per_task = 0;
};

// nullopt when `environment` has no SLURM_JOB_ID (not inside an allocation).
// InvalidArgument naming the variable when one is malformed or the node count is missing.
absl::StatusOr<absl::optional<SlurmAllocation>> SlurmAllocationFromEnvironment(
    const std::map<std::string, std::string>& environment);

// The launch mode for `--mode` ("auto", "local", "hosts" or "slurm"), given whether
// --hostfile or --hosts were set and whether the launcher runs inside a Slurm allocation.
// auto: --hostfile -> kHostfile, --hosts -> kHostList, else Slurm -> kSlurm, else kLocal.
// InvalidArgument naming the flags on contradictions (both --hostfile and --hosts; --hosts
// with --mode=local; --mode=slurm outside an allocation; ...).
absl::StatusOr<LaunchMode> ChooseLaunchMode(absl::string_view mode_flag, bool has_hostfile,
                                            bool has_hosts, bool in_slurm_allocation);

// Ranks per node under Slurm: `np` when > 0, else the allocation's tasks per node, else its
// GPUs per node. InvalidArgument when none is known, or when the ranks per node exceed the
// GPUs per node of an allocation with GPUs.
absl::StatusOr<int> SlurmRanksPerNode(int np, const SlurmAllocation& allocation);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_PLACEMENT_H_
