#include "launcher/launch_command.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "launcher/rank/data_service_args.h"

namespace stoker::launcher {
namespace {

bool IsShellSafe(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("@%+=:,./_-").find(c) != absl::string_view::npos;
}

// Quotes `word` in single quotes, whatever it holds.
std::string SingleQuote(absl::string_view word) {
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

}  // namespace

bool IsEnvironmentName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::vector<std::string> EnvironmentNamesWithPrefix(absl::Span<const std::string> environment,
                                                    absl::string_view prefix) {
  std::vector<std::string> names;
  for (absl::string_view entry : environment) {
    const size_t equals = entry.find('=');
    if (equals == absl::string_view::npos) continue;
    absl::string_view name = entry.substr(0, equals);
    if (absl::StartsWith(name, prefix)) names.emplace_back(name);
  }
  return names;
}

namespace {

// The mpirun placement options of the host modes, and the total rank count.
absl::StatusOr<std::vector<std::string>> HostPlacement(const TrainerLaunch& launch) {
  const char* flag = launch.mode == LaunchMode::kHostfile ? "--hostfile" : "--hosts";
  if (launch.hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " names no host"));
  if (launch.mode == LaunchMode::kHostfile && launch.hostfile.empty()) {
    return absl::InvalidArgumentError("--hostfile must not be empty");
  }
  if (launch.ranks_per_node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--np must be >= 0 (got ", launch.ranks_per_node, ")"));
  }
  int64_t total = 0;
  for (const HostSlots& host : launch.hosts) {
    if (launch.ranks_per_node == 0) {
      if (host.slots < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": host ", host.host, " states no slot count; write ",
                         launch.mode == LaunchMode::kHostfile ? "'HOST slots=N'" : "HOST:N",
                         " or pass --np=RANKS_PER_NODE"));
      }
      total += host.slots;
    } else {
      if (host.slots > 0 && host.slots < launch.ranks_per_node) {
        return absl::InvalidArgumentError(
            absl::StrCat("--np=", launch.ranks_per_node, " ranks per node, but ", flag, " gives ",
                         host.host, " only ", host.slots, " slot(s)"));
      }
      total += launch.ranks_per_node;
    }
  }
  std::vector<std::string> argv = {launch.mpirun, "-np", absl::StrCat(total)};
  if (launch.mode == LaunchMode::kHostfile) {
    argv.push_back("--hostfile");
    argv.push_back(launch.hostfile);
  } else {
    std::vector<std::string> hosts;
    for (const HostSlots& host : launch.hosts) {
      hosts.push_back(host.slots > 0 ? absl::StrCat(host.host, ":", host.slots) : host.host);
    }
    argv.push_back("-H");
    argv.push_back(absl::StrJoin(hosts, ","));
  }
  if (launch.ranks_per_node > 0) {
    argv.push_back("--map-by");
    argv.push_back(absl::StrCat("ppr:", launch.ranks_per_node, ":node"));
  }
  return argv;
}

absl::StatusOr<std::vector<std::string>> SlurmPlacement(const TrainerLaunch& launch) {
  if (launch.srun.empty()) return absl::InvalidArgumentError("--srun must not be empty");
  if (launch.slurm_nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Slurm allocation must have >= 1 node (got ", launch.slurm_nodes, ")"));
  }
  if (launch.ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--np must be >= 1 (got ", launch.ranks_per_node, ")"));
  }
  std::vector<std::string> argv = {
      launch.srun,
      absl::StrCat("--nodes=", launch.slurm_nodes),
      absl::StrCat("--ntasks=", static_cast<int64_t>(launch.slurm_nodes) * launch.ranks_per_node),
      absl::StrCat("--ntasks-per-node=", launch.ranks_per_node),
      "--kill-on-bad-exit=1",
      "--export=ALL",
  };
  if (launch.slurm_cpus_per_task > 0) {
    argv.push_back(absl::StrCat("--cpus-per-task=", launch.slurm_cpus_per_task));
  }
  // Every rank sees all of its node's GPUs and binds local rank i to GPU i itself
  // (launcher/rank/rank_setup.h), whatever binding the site or the sbatch options default to.
  if (launch.slurm_gpus) argv.push_back("--gpu-bind=none");
  return argv;
}

bool IsClusterMode(LaunchMode mode) { return mode != LaunchMode::kLocal; }

}  // namespace

absl::StatusOr<std::vector<std::string>> BuildTrainerArgv(const TrainerLaunch& launch) {
  const bool cluster = IsClusterMode(launch.mode);
  if (launch.mode != LaunchMode::kSlurm && launch.mpirun.empty()) {
    return absl::InvalidArgumentError("--mpirun must not be empty");
  }
  if (launch.trainer.empty()) return absl::InvalidArgumentError("--trainer must not be empty");
  if (!cluster && launch.data_socket.empty()) {
    return absl::InvalidArgumentError("the trainers' --data_socket must not be empty");
  }
  if (cluster && launch.job_id.empty()) {
    return absl::InvalidArgumentError("the trainers' --job_id must not be empty");
  }
  if (launch.mode == LaunchMode::kLocal && launch.ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--np must be >= 1 (got ", launch.ranks_per_node, ")"));
  }
  const bool srun = launch.mode == LaunchMode::kSlurm;
  for (const std::string& arg : srun ? launch.srun_args : launch.mpirun_args) {
    absl::string_view name = FlagNameOf(arg);
    const bool sets_count = srun ? (name == "n" || name == "ntasks" || name == "N" ||
                                    name == "nodes" || name == "ntasks-per-node")
                                 : (name == "np" || name == "n" || name == "c");
    if (sets_count) {
      return absl::InvalidArgumentError(
          absl::StrCat(srun ? "--srun_args" : "--mpirun_args", " must not set the rank count ('",
                       arg, "'): use the launcher's --np",
                       srun ? " (the node count comes from the allocation)" : ""));
    }
  }
  for (const std::string& arg : launch.data_service_args) {
    if (arg.find_first_of(" \t\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("data service argument '", arg,
                       "' holds whitespace, which the trainers' --data_service_args cannot carry"));
    }
  }
  for (const std::string& arg : launch.trainer_args) {
    absl::string_view name = FlagNameOf(arg);
    const bool set_by_launcher =
        name == "seed" || (cluster ? (name == "job_id" || name == "data_service_args" ||
                                      (name == "data_service" && !launch.data_service.empty()))
                                   : name == "data_socket");
    if (set_by_launcher) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer flag '", arg, "' after '--' conflicts with the launcher, which sets --", name,
          name == "seed" ? " from its own --seed" : " itself (use the launcher's flags)"));
    }
  }

  std::vector<std::string> argv;
  switch (launch.mode) {
    case LaunchMode::kLocal:
      argv = {launch.mpirun, "-np", absl::StrCat(launch.ranks_per_node)};
      break;
    case LaunchMode::kHostfile:
    case LaunchMode::kHostList: {
      ASSIGN_OR_RETURN(argv, HostPlacement(launch));
      break;
    }
    case LaunchMode::kSlurm: {
      ASSIGN_OR_RETURN(argv, SlurmPlacement(launch));
      break;
    }
  }
  if (srun) {
    argv.insert(argv.end(), launch.srun_args.begin(), launch.srun_args.end());
  } else {
    argv.insert(argv.end(), launch.mpirun_args.begin(), launch.mpirun_args.end());
  }
  absl::flat_hash_set<std::string> exported;
  for (const std::string& name : launch.exported_env) {
    if (!IsEnvironmentName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot export '", name, "' to the ranks: not a variable name"));
    }
    if (srun || !exported.insert(name).second) continue;
    argv.push_back("-x");
    argv.push_back(name);
  }
  argv.push_back(launch.trainer);
  if (cluster) {
    argv.push_back(absl::StrCat("--job_id=", launch.job_id));
    argv.push_back(absl::StrCat("--seed=", launch.seed));
    if (!launch.data_service.empty()) {
      argv.push_back(absl::StrCat("--data_service=", launch.data_service));
    }
    argv.push_back(
        absl::StrCat("--data_service_args=", absl::StrJoin(launch.data_service_args, " ")));
  } else {
    argv.push_back(absl::StrCat("--data_socket=", launch.data_socket));
    argv.push_back(absl::StrCat("--seed=", launch.seed));
  }
  argv.insert(argv.end(), launch.trainer_args.begin(), launch.trainer_args.end());
  return argv;
}

absl::StatusOr<std::vector<std::string>> DataServiceDatasetArgs(const DataServiceLaunch& launch) {
  if (launch.dataset != "" && launch.dataset != "synthetic" && launch.dataset != "imagefolder" &&
      launch.dataset != "packed") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset must be 'synthetic', 'imagefolder' or 'packed' (got '", launch.dataset, "')"));
  }
  if ((launch.dataset == "imagefolder" || launch.dataset == "packed") && launch.train_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset=", launch.dataset, " needs --train_dir"));
  }
  RETURN_IF_ERROR(ValidateDataServiceArgs(launch.extra_args));
  struct NonNegative {
    const char* flag;
    int64_t value;
  };
  for (const NonNegative& check : {NonNegative{"--synthetic_samples", launch.synthetic_samples},
                                   NonNegative{"--synthetic_classes", launch.synthetic_classes},
                                   NonNegative{"--data_threads", launch.threads},
                                   NonNegative{"--data_prefetch", launch.prefetch},
                                   NonNegative{"the node id", launch.node_id}}) {
    if (check.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(check.flag, " must be >= 0 (got ", check.value, ")"));
    }
  }
  std::vector<std::string> argv;
  if (!launch.dataset.empty()) argv.push_back(absl::StrCat("--dataset=", launch.dataset));
  if (!launch.train_dir.empty()) argv.push_back(absl::StrCat("--train_dir=", launch.train_dir));
  if (!launch.val_dir.empty()) argv.push_back(absl::StrCat("--val_dir=", launch.val_dir));
  if (launch.synthetic_samples > 0) {
    argv.push_back(absl::StrCat("--synthetic_samples=", launch.synthetic_samples));
  }
  if (launch.synthetic_classes > 0) {
    argv.push_back(absl::StrCat("--synthetic_classes=", launch.synthetic_classes));
  }
  if (launch.threads > 0) argv.push_back(absl::StrCat("--threads=", launch.threads));
  if (launch.prefetch > 0) argv.push_back(absl::StrCat("--prefetch=", launch.prefetch));
  argv.insert(argv.end(), launch.extra_args.begin(), launch.extra_args.end());
  return argv;
}

absl::StatusOr<std::vector<std::string>> BuildDataServiceArgv(const DataServiceLaunch& launch) {
  if (launch.program.empty()) {
    return absl::InvalidArgumentError("--data_service must not be empty");
  }
  if (launch.socket.empty() || launch.job_id.empty()) {
    return absl::InvalidArgumentError("the data service needs a socket path and a job id");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> dataset_args, DataServiceDatasetArgs(launch));
  std::vector<std::string> argv = {
      launch.program,
      absl::StrCat("--socket=", launch.socket),
      absl::StrCat("--job_id=", launch.job_id),
      absl::StrCat("--node_id=", launch.node_id),
      absl::StrCat("--data_seed=", launch.data_seed),
  };
  argv.insert(argv.end(), dataset_args.begin(), dataset_args.end());
  return argv;
}

std::string ShellQuote(absl::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), IsShellSafe)) {
    return std::string(word);
  }
  return SingleQuote(word);
}

std::string FormatCommand(absl::Span<const std::string> env, absl::Span<const std::string> argv) {
  std::vector<std::string> words;
  words.reserve(env.size() + argv.size());
  for (const std::string& entry : env) {
    // NAME=VALUE: only the value may need quoting, or the shell would not see an assignment.
    const size_t equals = entry.find('=');
    if (equals != std::string::npos && IsEnvironmentName(entry.substr(0, equals))) {
      words.push_back(
          absl::StrCat(entry.substr(0, equals + 1), ShellQuote(entry.substr(equals + 1))));
    } else {
      words.push_back(ShellQuote(entry));
    }
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    // A first word with '=' in it would read as one more assignment.
    const bool looks_like_assignment = i == 0 && argv[i].find('=') != std::string::npos;
    words.push_back(looks_like_assignment ? SingleQuote(argv[i]) : ShellQuote(argv[i]));
  }
  return absl::StrJoin(words, " ");
}

}  // namespace stoker::launcher
