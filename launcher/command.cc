#include "launcher/command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "launcher/doctor.h"
#include "launcher/flags.h"
#include "launcher/launch_command.h"
#include "launcher/placement.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/program_paths.h"

extern char** environ;

namespace stoker::launcher {
namespace {

// The program given by `flag`, or the sibling of the launcher named `name`.
absl::StatusOr<std::string> ProgramFlag(const std::string& value, absl::string_view name,
                                        absl::string_view flag) {
  if (!value.empty()) return value;
  ASSIGN_OR_RETURN(const std::string self, SelfDirectory());
  return FindSiblingProgram(self, name, flag);
}

std::map<std::string, std::string> EnvironmentMap(const std::vector<std::string>& environment) {
  std::map<std::string, std::string> map;
  for (const std::string& entry : environment) {
    const size_t equals = entry.find('=');
    if (equals != std::string::npos) map.emplace(entry.substr(0, equals), entry.substr(equals + 1));
  }
  return map;
}

// Reads and parses --hostfile.
absl::StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--hostfile ", path, ": cannot read it"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseHostfile(text.str(), path);
}

// A requeued Slurm job (scontrol requeue, --requeue after a preemption or node failure) runs
// this script again with SLURM_RESTART_COUNT > 0; the trainers resume by themselves from
// the newest checkpoint of --checkpoint_dir (--resume=auto, the default).
void LogSlurmRestart(const std::vector<std::string>& trainer_args) {
  const char* restarts = std::getenv("SLURM_RESTART_COUNT");
  if (restarts == nullptr || std::string(restarts).empty() || std::string(restarts) == "0") return;
  const bool checkpoints =
      std::any_of(trainer_args.begin(), trainer_args.end(), [](const std::string& arg) {
        return absl::StartsWith(arg, "--checkpoint_dir=") && arg != "--checkpoint_dir=";
      });
  if (checkpoints) {
    LogInfo(
        "SLURM_RESTART_COUNT=%s: a requeued job; the trainers resume from the newest "
        "checkpoint of their --checkpoint_dir (--resume=auto)",
        restarts);
  } else {
    LogWarning(
        "SLURM_RESTART_COUNT=%s: a requeued job, but the trainers have no "
        "--checkpoint_dir: they start afresh",
        restarts);
  }
}

// A trainer flag's value among `args` ("--name=value"), or `fallback`.
int64_t TrainerFlagOr(const std::vector<std::string>& args, absl::string_view name,
                      int64_t fallback) {
  const std::string prefix = absl::StrCat("--", name, "=");
  int64_t value = fallback;
  for (const std::string& arg : args) {
    if (absl::StartsWith(arg, prefix)) (void)absl::SimpleAtoi(arg.substr(prefix.size()), &value);
  }
  return value;
}

// The data service's --trace_steps for trainers that trace `trace_steps` (their window in
// optimizer steps, "" for their default: 10 after --warmup_steps, 10 by default): its rings
// count batches, --accumulate to a step. The trainers check the flags themselves.
std::string DataServiceTraceSteps(const std::string& trace_steps,
                                  const std::vector<std::string>& trainer_args) {
  const int64_t accumulate = std::max<int64_t>(1, TrainerFlagOr(trainer_args, "accumulate", 1));
  int64_t first = TrainerFlagOr(trainer_args, "warmup_steps", 10);
  int64_t end = first + 10;
  std::vector<std::string> parts = absl::StrSplit(trace_steps, ':');
  if (parts.size() == 2) {
    (void)absl::SimpleAtoi(parts[0], &first);
    (void)absl::SimpleAtoi(parts[1], &end);
  }
  return absl::StrCat(first * accumulate, ":", end * accumulate);
}

}  // namespace

bool IsDoctorCommand(const std::vector<std::string>& args) {
  return !args.empty() && args[0] == "doctor";
}

int ReportUsageError(absl::string_view message) {
  std::fprintf(stderr, "launcher: %s\n%sRun `launcher --help` for the flags.\n",
               std::string(message).c_str(), kLauncherUsage);
  return kExitUsage;
}

int RunDoctorCommand(const std::vector<std::string>& args) {
  absl::StatusOr<DoctorOptions> options = ParseDoctorArgs(args);
  if (!options.ok()) return ReportUsageError(options.status().message());
  if (options->help) {
    std::printf(
        "Usage: launcher doctor [flags]\n\nChecks this machine for what a Stoker job "
        "needs, each check with a verdict and a fix; exits 1 when a check fails.\n\n"
        "Flags:\n%s",
        DoctorFlagsHelp().c_str());
    return 0;
  }
  const std::vector<Check> checks = Evaluate(GatherFacts(*options), *options);
  std::fputs(FormatReport(checks, *options).c_str(), stdout);
  return DoctorExitCode(checks);
}

std::vector<std::string> ProcessEnvironment() {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  return environment;
}

absl::StatusOr<JobConfig> JobConfigFor(const LauncherOptions& options,
                                       const std::vector<std::string>& environment) {
  const std::map<std::string, std::string> variables = EnvironmentMap(environment);
  const PlacementOptions& placement = options.placement;
  JobConfig config;
  config.job_id = options.job_id.empty() ? GenerateJobId() : options.job_id;
  const auto path = variables.find("PATH");
  config.search_path = path != variables.end() ? path->second : "";
  config.ready_timeout = options.ready_timeout;
  config.shutdown_grace = options.shutdown_grace;
  config.stop_grace = options.stop_grace;

  absl::StatusOr<absl::optional<SlurmAllocation>> slurm = SlurmAllocationFromEnvironment(variables);
  ASSIGN_OR_RETURN(const LaunchMode mode,
                   ChooseLaunchMode(placement.mode, !placement.hostfile.empty(),
                                    !placement.hosts.empty(), slurm.ok() && slurm->has_value()));
  const bool local = mode == LaunchMode::kLocal;

  std::string data_service_program = options.data_service;
  if (local) {
    ASSIGN_OR_RETURN(data_service_program,
                     ProgramFlag(data_service_program, "data_service", "--data_service"));
  }
  config.data_service.program = data_service_program;
  config.data_service.dataset = options.data.dataset;
  config.data_service.train_dir = options.data.train_dir;
  config.data_service.val_dir = options.data.val_dir;
  config.data_service.synthetic_samples = options.data.synthetic_samples;
  config.data_service.synthetic_classes = options.data.synthetic_classes;
  config.data_service.threads = options.data.threads;
  config.data_service.prefetch = options.data.prefetch;
  config.data_service.data_seed = options.seed;
  config.data_service.extra_args = options.data.extra_args;
  if (!options.trace_dir.empty() && local) {
    // The cluster modes' services get it from the node's local rank 0, with its --trace.
    config.data_service.extra_args.push_back(absl::StrCat("--trace=", options.trace_dir));
    config.data_service.extra_args.push_back(absl::StrCat(
        "--trace_steps=", DataServiceTraceSteps(options.trace_steps, options.trainer_args)));
  }

  TrainerLaunch& trainers = config.trainers;
  ASSIGN_OR_RETURN(trainers.trainer, ProgramFlag(options.trainer, "trainer", "--trainer"));
  trainers.mode = mode;
  trainers.mpirun = placement.mpirun;
  trainers.srun = placement.srun;
  trainers.mpirun_args = placement.mpirun_args;
  trainers.srun_args = placement.srun_args;
  trainers.ranks_per_node = placement.ranks_per_node;
  const bool np_given = placement.ranks_per_node_given;
  switch (mode) {
    case LaunchMode::kLocal:
      break;
    case LaunchMode::kHostfile: {
      ASSIGN_OR_RETURN(trainers.hosts, ReadHostfile(placement.hostfile));
      trainers.hostfile = placement.hostfile;
      if (!np_given) trainers.ranks_per_node = 0;
      break;
    }
    case LaunchMode::kHostList: {
      ASSIGN_OR_RETURN(trainers.hosts, ParseHostList(placement.hosts));
      if (!np_given) trainers.ranks_per_node = 0;
      break;
    }
    case LaunchMode::kSlurm: {
      if (!slurm.ok()) return slurm.status();
      const SlurmAllocation& allocation = **slurm;
      ASSIGN_OR_RETURN(trainers.ranks_per_node,
                       SlurmRanksPerNode(np_given ? trainers.ranks_per_node : 0, allocation));
      trainers.slurm_nodes = allocation.nodes;
      trainers.slurm_gpus = allocation.gpus_per_node > 0;
      trainers.slurm_cpus_per_task = allocation.cpus_per_task;
      break;
    }
  }
  trainers.seed = options.seed;
  trainers.trainer_args = options.trainer_args;
  if (!options.trace_dir.empty()) {
    trainers.trainer_args.push_back(absl::StrCat("--trace=", options.trace_dir));
    if (!options.trace_steps.empty()) {
      trainers.trainer_args.push_back(absl::StrCat("--trace_steps=", options.trace_steps));
    }
  }
  // STOKER_* settings reach every rank, also on other hosts; so does the library path that
  // bundle/stoker sets (remote ranks do not inherit mpirun's environment).
  trainers.exported_env = EnvironmentNamesWithPrefix(environment, "STOKER_");
  if (!local && variables.count("LD_LIBRARY_PATH") > 0) {
    trainers.exported_env.push_back("LD_LIBRARY_PATH");
  }
  return config;
}

int RunPlannedJob(const JobPlan& plan, const std::vector<std::string>& trainer_args) {
  const char* nvls = std::getenv(kNvlsEnableVariable);
  if (nvls != nullptr && std::string(nvls) != "0") {
    LogWarning("%s=%s in the environment is overridden: jobs run with %s=0", kNvlsEnableVariable,
               nvls, kNvlsEnableVariable);
  }
  if (plan.mode == LaunchMode::kSlurm) LogSlurmRestart(trainer_args);

  const JobResult result = RunJob(plan);
  if (result.status.ok()) {
    LogInfo("job %s finished", plan.job_id);
  } else {
    LogError("job %s failed: %s (%s, exit %d)", plan.job_id, result.status.message(),
             ExitCause(result.exit_code), result.exit_code);
  }
  return result.exit_code;
}

}  // namespace stoker::launcher
