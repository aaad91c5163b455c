#include "launcher/placement.h"

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stoker::launcher {
namespace {

// A positive count, or nullopt.
absl::optional<int> PositiveInt(absl::string_view text) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 1) return absl::nullopt;
  return value;
}

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool IsHostName(absl::string_view host) {
  if (host.empty()) return false;
  for (char c : host) {
    if (!IsHostChar(c)) return false;
  }
  return true;
}

std::string Lookup(const std::map<std::string, std::string>& environment, const char* name) {
  auto it = environment.find(name);
  return it == environment.end() ? std::string() : it->second;
}

// Slurm's per-node task lists: "8", "8(x2)", "8(x2),8". Returns the count when every node
// has the same one, 0 when they differ.
absl::StatusOr<int> UniformTaskCount(absl::string_view value, absl::string_view variable) {
  int common = 0;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    absl::string_view count = part.substr(0, part.find('('));
    absl::optional<int> tasks = PositiveInt(count);
    if (!tasks.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(variable, "='", value, "': not a Slurm task count list"));
    }
    if (common != 0 && *tasks != common) return 0;
    common = *tasks;
  }
  return common;
}

// SLURM_GPUS_PER_NODE / SLURM_GPUS_ON_NODE: "8" or "type:8".
absl::optional<int> GpuCount(absl::string_view value) {
  const size_t colon = value.rfind(':');
  if (colon != absl::string_view::npos) value.remove_prefix(colon + 1);
  return PositiveInt(value);
}

}  // namespace

absl::string_view LaunchModeName(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kLocal:
      return "local";
    case LaunchMode::kHostfile:
      return "hostfile";
    case LaunchMode::kHostList:
      return "hosts";
    case LaunchMode::kSlurm:
      return "slurm";
  }
  return "?";
}

absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view hosts) {
  std::vector<HostSlots> parsed;
  absl::flat_hash_set<std::string> seen;
  if (absl::StripAsciiWhitespace(hosts).empty()) {
    return absl::InvalidArgumentError("--hosts is empty");
  }
  for (absl::string_view entry : absl::StrSplit(hosts, ',')) {
    HostSlots host;
    const size_t colon = entry.find(':');
    host.host = std::string(entry.substr(0, colon));
    if (!IsHostName(host.host)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hosts: '", entry, "' is not host or host:slots"));
    }
    if (colon != absl::string_view::npos) {
      absl::optional<int> slots = PositiveInt(entry.substr(colon + 1));
      if (!slots.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--hosts: '", entry, "': the slot count must be a positive number"));
      }
      host.slots = *slots;
    }
    if (!seen.insert(host.host).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hosts names ", host.host, " twice: give each host once with its slots"));
    }
    parsed.push_back(std::move(host));
  }
  return parsed;
}

absl::StatusOr<std::vector<HostSlots>> ParseHostfile(absl::string_view text,
                                                     absl::string_view path) {
  std::vector<HostSlots> parsed;
  absl::flat_hash_set<std::string> seen;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hostfile ", path, " line ", line_number, ": ", why));
    };
    HostSlots host;
    host.host = std::string(words[0]);
    if (!IsHostName(host.host)) return bad(absl::StrCat("'", words[0], "' is not a host name"));
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view word = words[i];
      if (absl::ConsumePrefix(&word, "slots=")) {
        absl::optional<int> slots = PositiveInt(word);
        if (!slots.has_value()) return bad(absl::StrCat("bad slot count '", words[i], "'"));
        host.slots = *slots;
      } else if (!absl::StartsWith(word, "max_slots=")) {
        return bad(absl::StrCat("unknown word '", word, "' (expected slots=N)"));
      }
    }
    if (!seen.insert(host.host).second) return bad(absl::StrCat(host.host, " is listed twice"));
    parsed.push_back(std::move(host));
  }
  if (parsed.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--hostfile ", path, " lists no host"));
  }
  return parsed;
}

absl::StatusOr<absl::optional<SlurmAllocation>> SlurmAllocationFromEnvironment(
    const std::map<std::string, std::string>& environment) {
  SlurmAllocation allocation;
  allocation.job_id = Lookup(environment, "SLURM_JOB_ID");
  if (allocation.job_id.empty()) return absl::optional<SlurmAllocation>();

  const char* nodes_variable = "SLURM_JOB_NUM_NODES";
  std::string nodes = Lookup(environment, nodes_variable);
  if (nodes.empty()) {
    nodes_variable = "SLURM_NNODES";
    nodes = Lookup(environment, nodes_variable);
  }
  absl::optional<int> node_count = PositiveInt(nodes);
  if (!node_count.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("inside Slurm job ", allocation.job_id, " but ",
                                                   nodes_variable, "='", nodes,
                                                   "' is not a node count"));
  }
  allocation.nodes = *node_count;

  for (const char* variable : {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const std::string value = Lookup(environment, variable);
    if (value.empty()) continue;
    absl::StatusOr<int> tasks = UniformTaskCount(value, variable);
    if (!tasks.ok()) return tasks.status();
    allocation.tasks_per_node = *tasks;
    break;
  }

  for (const char* variable : {"SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"}) {
    const std::string value = Lookup(environment, variable);
    if (value.empty()) continue;
    absl::optional<int> gpus = GpuCount(value);
    if (!gpus.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(variable, "='", value, "' is not a GPU count"));
    }
    allocation.gpus_per_node = *gpus;
    break;
  }
  const std::string cpus = Lookup(environment, "SLURM_CPUS_PER_TASK");
  if (!cpus.empty()) {
    absl::optional<int> count = PositiveInt(cpus);
    if (!count.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_CPUS_PER_TASK='", cpus, "' is not a CPU count"));
    }
    allocation.cpus_per_task = *count;
  }
  if (allocation.gpus_per_node == 0) {
    const std::string job_gpus = Lookup(environment, "SLURM_JOB_GPUS");
    if (!job_gpus.empty()) {
      allocation.gpus_per_node = static_cast<int>(
          std::vector<absl::string_view>(absl::StrSplit(job_gpus, ',', absl::SkipEmpty())).size());
    }
  }
  return absl::optional<SlurmAllocation>(std::move(allocation));
}

absl::StatusOr<LaunchMode> ChooseLaunchMode(absl::string_view mode_flag, bool has_hostfile,
                                            bool has_hosts, bool in_slurm_allocation) {
  if (has_hostfile && has_hosts) {
    return absl::InvalidArgumentError("--hostfile and --hosts both name the hosts: give one");
  }
  if (mode_flag == "auto") {
    if (has_hostfile) return LaunchMode::kHostfile;
    if (has_hosts) return LaunchMode::kHostList;
    return in_slurm_allocation ? LaunchMode::kSlurm : LaunchMode::kLocal;
  }
  if (mode_flag == "local") {
    if (has_hostfile || has_hosts) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mode=local runs on this machine only, but --",
                       has_hostfile ? "hostfile" : "hosts", " names hosts"));
    }
    return LaunchMode::kLocal;
  }
  if (mode_flag == "hosts") {
    if (has_hostfile) return LaunchMode::kHostfile;
    if (has_hosts) return LaunchMode::kHostList;
    return absl::InvalidArgumentError("--mode=hosts needs --hostfile=FILE or --hosts=h1:n,h2:n");
  }
  if (mode_flag == "slurm") {
    if (has_hostfile || has_hosts) {
      return absl::InvalidArgumentError(
          "--mode=slurm takes the hosts from the allocation: drop --hostfile/--hosts");
    }
    if (!in_slurm_allocation) {
      return absl::InvalidArgumentError(
          "--mode=slurm but SLURM_JOB_ID is not set: run inside sbatch or salloc "
          "(see launcher/slurm/)");
    }
    return LaunchMode::kSlurm;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--mode='", mode_flag, "': use auto, local, hosts or slurm"));
}

absl::StatusOr<int> SlurmRanksPerNode(int np, const SlurmAllocation& allocation) {
  int ranks = np;
  if (ranks <= 0) ranks = allocation.tasks_per_node;
  if (ranks <= 0) ranks = allocation.gpus_per_node;
  if (ranks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Slurm job ", allocation.job_id,
        " states neither tasks nor GPUs per node: pass --np=RANKS_PER_NODE, or submit with "
        "--ntasks-per-node or --gpus-per-node"));
  }
  if (allocation.gpus_per_node > 0 && ranks > allocation.gpus_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(ranks, " ranks per node (", np > 0 ? "--np" : "SLURM_NTASKS_PER_NODE",
                     ") but Slurm job ", allocation.job_id, " has ", allocation.gpus_per_node,
                     " GPU(s) per node: at most one rank per GPU"));
  }
  return ranks;
}

}  // namespace stoker::launcher
