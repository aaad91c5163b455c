// launcher: runs one Stoker training job. `launcher [flags] -- [trainer flags]` runs the
// trainers on this machine under mpirun (after starting the data service and waiting until
// it is ready), on several hosts under mpirun (--hostfile, --hosts), or under srun inside a
// Slurm allocation, and cleans up. `launcher doctor [flags]` checks the machine.
// Exit codes are the table of common/exit_codes.h: 0 on success, 2 for usage errors, 128 +
// signal when stopped by SIGINT/SIGTERM/SIGHUP (143 for SIGTERM), else the first failure's
// code (Note [Exit code of a job] in launcher/job.cc); doctor: 1 when a check fails.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <map>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/flags.h"
#include "common/logging.h"
#include "launcher/rank/data_service_args.h"
#include "launcher/doctor.h"
#include "launcher/job.h"
#include "launcher/rank/job_files.h"
#include "launcher/launch_command.h"
#include "launcher/placement.h"
#include "launcher/rank/program_paths.h"

extern char** environ;

ABSL_FLAG(int, np, 1,
          "Trainer ranks per node. With --hosts/--hostfile, when not given: each host's slots. "
          "Under Slurm, when not given: the allocation's tasks (else GPUs) per node.");
ABSL_FLAG(std::string, mode, "auto",
          "auto, local, hosts or slurm. auto: --hostfile/--hosts mean hosts, SLURM_JOB_ID in "
          "the environment means slurm, else local.");
ABSL_FLAG(std::string, hostfile, "",
          "Open MPI hostfile (`host slots=N` lines): run on those hosts under mpirun.");
ABSL_FLAG(std::string, hosts, "",
          "Hosts as host:slots,host:slots (mpirun -H): run on those hosts under mpirun.");
ABSL_FLAG(std::string, srun, "srun", "srun program (Slurm mode); a bare name is looked up on PATH.");
ABSL_FLAG(std::string, srun_args, "",
          "Extra srun arguments (Slurm mode), split on spaces and passed verbatim, e.g. "
          "--srun_args='--mpi=pmix --cpus-per-task=12'.");
ABSL_FLAG(std::string, trainer, "",
          "Trainer program. Default: `trainer` next to the launcher, or ../trainer/trainer.");
ABSL_FLAG(std::string, data_service, "",
          "Data service program. Default: `data_service` next to the launcher, or "
          "../data_service/data_service; in the cluster modes, next to the trainer on each node.");
ABSL_FLAG(std::string, mpirun, "mpirun", "mpirun program; a bare name is looked up on PATH.");
ABSL_FLAG(std::string, mpirun_args, "",
          "Extra mpirun arguments, split on spaces and passed verbatim after the placement "
          "options (-np, --hostfile/-H, --map-by).");
ABSL_FLAG(uint64_t, seed, 0,
          "Base seed: every trainer's --seed and the data service's --data_seed.");
ABSL_FLAG(std::string, job_id, "",
          "Job id, naming /tmp/stoker.<job_id>/ and /dev/shm/stoker.<job_id>.*. "
          "Default: <host>-<pid>-<random>.");
ABSL_FLAG(std::string, dataset, "", "Data service --dataset: synthetic, imagefolder or packed.");
ABSL_FLAG(std::string, train_dir, "", "Data service --train_dir: the folder (imagefolder) or the index file (packed).");
ABSL_FLAG(std::string, val_dir, "", "Data service --val_dir: the folder (imagefolder) or the index file (packed).");
ABSL_FLAG(int64_t, synthetic_samples, 0, "Data service --synthetic_samples (0: its default).");
ABSL_FLAG(int, synthetic_classes, 0, "Data service --synthetic_classes (0: its default).");
ABSL_FLAG(int, data_threads, 0, "Data service --threads (0: its default).");
ABSL_FLAG(int, data_prefetch, 0, "Data service --prefetch (0: its default).");
ABSL_FLAG(std::string, data_service_args, "",
          "More data service flags, split on spaces, each --name=value, e.g. "
          "--data_service_args='--bad_files=fail --jpeg_decode=exact'. Passed after the data "
          "service flags the launcher sets (--dataset, --threads, --data_seed, ...), so they "
          "win; in the cluster modes they reach every node's data service (through the "
          "trainers' --data_service_args). Must not set --socket, --job_id or --node_id.");
ABSL_FLAG(absl::Duration, ready_timeout, absl::Seconds(60),
          "How long the data service may take to accept connections on its socket.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "How long a stopped child may take between SIGTERM and SIGKILL.");
ABSL_FLAG(absl::Duration, stop_grace, absl::Seconds(90),
          "After SIGINT/SIGTERM/SIGHUP: how long the ranks may take to stop at a step boundary "
          "with a checkpoint (they get SIGUSR2 through mpirun or srun) before they are stopped. "
          "Keep it below the scheduler's warning (the Slurm templates ask for SIGTERM 120 s "
          "before the time limit) less --shutdown_grace. 0: stop them at once.");
ABSL_FLAG(bool, dry_run, false, "Print the commands the job would run, then exit 0.");

namespace stoker::launcher {
namespace {

constexpr char kUsage[] =
    "Usage: launcher [flags] -- [trainer flags]\n"
    "       launcher doctor [--np=N] [--batch_size=B] [--image_size=S] [--ring_slots=K] "
    "[--mpirun=PROGRAM]\n";

// The launcher's own flags (this file's), in the launcher's wording; `--` ends them.
FlagSpec LauncherFlagSpec() {
  FlagSpec spec;
  spec.program = "launcher";
  spec.files = {"launcher/main.cc"};
  spec.passed_on = true;
  spec.positional_hint = "trainer flags go after '--'";
  spec.wording = FlagWording::kSentence;
  return spec;
}

int UsageError(absl::string_view message) {
  std::fprintf(stderr, "launcher: %s\n%sRun `launcher --help` for the flags.\n",
               std::string(message).c_str(), kUsage);
  return kExitUsage;
}

// The program given by `flag`, or the sibling of the launcher named `name`.
absl::StatusOr<std::string> ProgramFlag(const std::string& value, absl::string_view name,
                                        absl::string_view flag) {
  if (!value.empty()) return value;
  absl::StatusOr<std::string> self = SelfDirectory();
  if (!self.ok()) return self.status();
  return FindSiblingProgram(*self, name, flag);
}

std::vector<std::string> Environment() {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  return environment;
}

std::map<std::string, std::string> EnvironmentMap() {
  std::map<std::string, std::string> map;
  for (const std::string& entry : Environment()) {
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

absl::StatusOr<JobConfig> ConfigFromFlags(const ParsedFlags& command_line) {
  JobConfig config;
  config.job_id = absl::GetFlag(FLAGS_job_id);
  if (config.job_id.empty()) config.job_id = GenerateJobId();
  const char* path = std::getenv("PATH");
  config.search_path = path != nullptr ? path : "";
  config.ready_timeout = absl::GetFlag(FLAGS_ready_timeout);
  config.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  config.stop_grace = absl::GetFlag(FLAGS_stop_grace);

  const std::map<std::string, std::string> environment = EnvironmentMap();
  absl::StatusOr<absl::optional<SlurmAllocation>> slurm =
      SlurmAllocationFromEnvironment(environment);
  const std::string hostfile = absl::GetFlag(FLAGS_hostfile);
  const std::string hosts = absl::GetFlag(FLAGS_hosts);
  absl::StatusOr<LaunchMode> mode =
      ChooseLaunchMode(absl::GetFlag(FLAGS_mode), !hostfile.empty(), !hosts.empty(),
                       slurm.ok() && slurm->has_value());
  if (!mode.ok()) return mode.status();
  const bool local = *mode == LaunchMode::kLocal;
  const bool np_given = command_line.given.count("np") > 0;

  std::string data_service_program = absl::GetFlag(FLAGS_data_service);
  if (local) {
    absl::StatusOr<std::string> data_service =
        ProgramFlag(data_service_program, "data_service", "--data_service");
    if (!data_service.ok()) return data_service.status();
    data_service_program = *data_service;
  }
  config.data_service.program = data_service_program;
  config.data_service.dataset = absl::GetFlag(FLAGS_dataset);
  config.data_service.train_dir = absl::GetFlag(FLAGS_train_dir);
  config.data_service.val_dir = absl::GetFlag(FLAGS_val_dir);
  config.data_service.synthetic_samples = absl::GetFlag(FLAGS_synthetic_samples);
  config.data_service.synthetic_classes = absl::GetFlag(FLAGS_synthetic_classes);
  config.data_service.threads = absl::GetFlag(FLAGS_data_threads);
  config.data_service.prefetch = absl::GetFlag(FLAGS_data_prefetch);
  config.data_service.data_seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<std::vector<std::string>> data_service_args =
      ParseDataServiceArgs(absl::GetFlag(FLAGS_data_service_args));
  if (!data_service_args.ok()) return data_service_args.status();
  config.data_service.extra_args = std::move(*data_service_args);

  absl::StatusOr<std::string> trainer =
      ProgramFlag(absl::GetFlag(FLAGS_trainer), "trainer", "--trainer");
  if (!trainer.ok()) return trainer.status();
  TrainerLaunch& trainers = config.trainers;
  trainers.mode = *mode;
  trainers.trainer = *trainer;
  trainers.mpirun = absl::GetFlag(FLAGS_mpirun);
  trainers.srun = absl::GetFlag(FLAGS_srun);
  std::vector<std::string> mpirun_args =
      absl::StrSplit(absl::GetFlag(FLAGS_mpirun_args), ' ', absl::SkipEmpty());
  trainers.mpirun_args = std::move(mpirun_args);
  std::vector<std::string> srun_args =
      absl::StrSplit(absl::GetFlag(FLAGS_srun_args), ' ', absl::SkipEmpty());
  trainers.srun_args = std::move(srun_args);
  trainers.ranks_per_node = absl::GetFlag(FLAGS_np);
  switch (*mode) {
    case LaunchMode::kLocal:
      break;
    case LaunchMode::kHostfile: {
      absl::StatusOr<std::vector<HostSlots>> parsed = ReadHostfile(hostfile);
      if (!parsed.ok()) return parsed.status();
      trainers.hosts = std::move(*parsed);
      trainers.hostfile = hostfile;
      if (!np_given) trainers.ranks_per_node = 0;
      break;
    }
    case LaunchMode::kHostList: {
      absl::StatusOr<std::vector<HostSlots>> parsed = ParseHostList(hosts);
      if (!parsed.ok()) return parsed.status();
      trainers.hosts = std::move(*parsed);
      if (!np_given) trainers.ranks_per_node = 0;
      break;
    }
    case LaunchMode::kSlurm: {
      if (!slurm.ok()) return slurm.status();
      const SlurmAllocation& allocation = **slurm;
      absl::StatusOr<int> ranks =
          SlurmRanksPerNode(np_given ? trainers.ranks_per_node : 0, allocation);
      if (!ranks.ok()) return ranks.status();
      trainers.ranks_per_node = *ranks;
      trainers.slurm_nodes = allocation.nodes;
      trainers.slurm_gpus = allocation.gpus_per_node > 0;
      trainers.slurm_cpus_per_task = allocation.cpus_per_task;
      break;
    }
  }
  trainers.seed = absl::GetFlag(FLAGS_seed);
  trainers.trainer_args = command_line.passed_on;
  // STOKER_* settings reach every rank, also on other hosts; so does the library path that
  // bundle/stoker sets (remote ranks do not inherit mpirun's environment).
  const std::vector<std::string> environ_entries = Environment();
  trainers.exported_env = EnvironmentNamesWithPrefix(environ_entries, "STOKER_");
  if (!local && environment.count("LD_LIBRARY_PATH") > 0) {
    trainers.exported_env.push_back("LD_LIBRARY_PATH");
  }
  return config;
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

int RunDoctor(const std::vector<std::string>& args) {
  absl::StatusOr<DoctorOptions> options = ParseDoctorArgs(args);
  if (!options.ok()) return UsageError(options.status().message());
  if (options->help) {
    std::printf("Usage: launcher doctor [flags]\n\nChecks this machine for what a Stoker job "
                "needs, each check with a verdict and a fix; exits 1 when a check fails.\n\n"
                "Flags:\n%s",
                DoctorFlagsHelp().c_str());
    return 0;
  }
  const std::vector<Check> checks = Evaluate(GatherFacts(*options), *options);
  std::fputs(FormatReport(checks, *options).c_str(), stdout);
  return DoctorExitCode(checks);
}

int Main(int argc, char** argv) {
  SetLogIdentity("launcher");
  if (argc >= 2 && std::string(argv[1]) == "doctor") {
    return RunDoctor(std::vector<std::string>(argv + 2, argv + argc));
  }
  const FlagSpec spec = LauncherFlagSpec();
  absl::StatusOr<ParsedFlags> command_line = ParseFlags(absl::MakeConstSpan(argv + 1, argc - 1), spec);
  if (!command_line.ok()) return UsageError(command_line.status().message());
  if (command_line->help) {
    std::printf("%s\nRuns one Stoker training job: on this machine (the data service, then the "
                "trainers under mpirun), on several hosts under mpirun (--hostfile, --hosts), or "
                "under srun inside a Slurm allocation (each node's local rank 0 then starts the "
                "node's data service). `launcher doctor` checks this machine.\n\nFlags:\n%s",
                kUsage, FlagsHelp(spec).c_str());
    return 0;
  }

  absl::StatusOr<JobConfig> config = ConfigFromFlags(*command_line);
  if (!config.ok()) return UsageError(config.status().message());
  absl::StatusOr<JobPlan> plan = PlanJob(*config);
  if (!plan.ok()) return UsageError(plan.status().message());
  if (absl::GetFlag(FLAGS_dry_run)) {
    std::fputs(FormatPlan(*plan).c_str(), stdout);
    return 0;
  }
  const char* nvls = std::getenv(kNvlsEnableVariable);
  if (nvls != nullptr && std::string(nvls) != "0") {
    LogWarning("%s=%s in the environment is overridden: jobs run with %s=0", kNvlsEnableVariable,
               nvls, kNvlsEnableVariable);
  }

  if (plan->mode == LaunchMode::kSlurm) LogSlurmRestart(command_line->passed_on);

  JobResult result = RunJob(*plan);
  if (result.status.ok()) {
    LogInfo("job %s finished", plan->job_id);
  } else {
    LogError("job %s failed: %s (%s, exit %d)", plan->job_id, result.status.message(),
             ExitCause(result.exit_code), result.exit_code);
  }
  return result.exit_code;
}

}  // namespace
}  // namespace stoker::launcher

int main(int argc, char** argv) { return stoker::launcher::Main(argc, argv); }
