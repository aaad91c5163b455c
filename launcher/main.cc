// launcher: runs one Stoker training job on this machine. `launcher [flags] -- [trainer
// flags]` starts the data service, waits until it is ready, runs the trainers under mpirun,
// and cleans up. Exit code: 0 on success, 2 for usage errors, else the first failure's code.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "launcher/command_line.h"
#include "launcher/job.h"
#include "launcher/job_files.h"
#include "launcher/launch_command.h"
#include "launcher/program_paths.h"

extern char** environ;

ABSL_FLAG(int, np, 1, "Trainer ranks to run on this node.");
ABSL_FLAG(std::string, trainer, "",
          "Trainer program. Default: `trainer` next to the launcher, or ../trainer/trainer.");
ABSL_FLAG(std::string, data_service, "",
          "Data service program. Default: `data_service` next to the launcher, or "
          "../data_service/data_service.");
ABSL_FLAG(std::string, mpirun, "mpirun", "mpirun program; a bare name is looked up on PATH.");
ABSL_FLAG(std::string, mpirun_args, "",
          "Extra mpirun arguments, split on spaces and passed verbatim after -np.");
ABSL_FLAG(uint64_t, seed, 0,
          "Base seed: every trainer's --seed and the data service's --data_seed.");
ABSL_FLAG(std::string, job_id, "",
          "Job id, naming /tmp/stoker.<job_id>/ and /dev/shm/stoker.<job_id>.*. "
          "Default: <host>-<pid>-<random>.");
ABSL_FLAG(std::string, dataset, "", "Data service --dataset: synthetic or imagefolder.");
ABSL_FLAG(std::string, train_dir, "", "Data service --train_dir (imagefolder).");
ABSL_FLAG(std::string, val_dir, "", "Data service --val_dir (imagefolder).");
ABSL_FLAG(int64_t, synthetic_samples, 0, "Data service --synthetic_samples (0: its default).");
ABSL_FLAG(int, synthetic_classes, 0, "Data service --synthetic_classes (0: its default).");
ABSL_FLAG(int, data_threads, 0, "Data service --threads (0: its default).");
ABSL_FLAG(int, data_prefetch, 0, "Data service --prefetch (0: its default).");
ABSL_FLAG(absl::Duration, ready_timeout, absl::Seconds(60),
          "How long the data service may take to accept connections on its socket.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "How long a stopped child may take between SIGTERM and SIGKILL.");
ABSL_FLAG(bool, dry_run, false, "Print the commands the job would run, then exit 0.");

namespace stoker::launcher {
namespace {

constexpr char kFlagsFile[] = "launcher/main.cc";
constexpr char kUsage[] = "Usage: launcher [flags] -- [trainer flags]\n";
constexpr int kUsageExitCode = 2;

int UsageError(absl::string_view message) {
  std::fprintf(stderr, "launcher: %s\n%sRun `launcher --help` for the flags.\n",
               std::string(message).c_str(), kUsage);
  return kUsageExitCode;
}

// The program given by `flag`, or the sibling of the launcher named `name`.
absl::StatusOr<std::string> ProgramFlag(const std::string& value, absl::string_view name,
                                        absl::string_view flag) {
  if (!value.empty()) return value;
  absl::StatusOr<std::string> self = SelfDirectory();
  if (!self.ok()) return self.status();
  return FindSiblingProgram(*self, name, flag);
}

absl::StatusOr<JobConfig> ConfigFromFlags(std::vector<std::string> trainer_args) {
  JobConfig config;
  config.job_id = absl::GetFlag(FLAGS_job_id);
  if (config.job_id.empty()) config.job_id = GenerateJobId();
  const char* path = std::getenv("PATH");
  config.search_path = path != nullptr ? path : "";
  config.ready_timeout = absl::GetFlag(FLAGS_ready_timeout);
  config.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);

  absl::StatusOr<std::string> data_service =
      ProgramFlag(absl::GetFlag(FLAGS_data_service), "data_service", "--data_service");
  if (!data_service.ok()) return data_service.status();
  config.data_service.program = *data_service;
  config.data_service.dataset = absl::GetFlag(FLAGS_dataset);
  config.data_service.train_dir = absl::GetFlag(FLAGS_train_dir);
  config.data_service.val_dir = absl::GetFlag(FLAGS_val_dir);
  config.data_service.synthetic_samples = absl::GetFlag(FLAGS_synthetic_samples);
  config.data_service.synthetic_classes = absl::GetFlag(FLAGS_synthetic_classes);
  config.data_service.threads = absl::GetFlag(FLAGS_data_threads);
  config.data_service.prefetch = absl::GetFlag(FLAGS_data_prefetch);
  config.data_service.data_seed = absl::GetFlag(FLAGS_seed);

  absl::StatusOr<std::string> trainer =
      ProgramFlag(absl::GetFlag(FLAGS_trainer), "trainer", "--trainer");
  if (!trainer.ok()) return trainer.status();
  config.trainers.mode = LaunchMode::kLocal;
  config.trainers.trainer = *trainer;
  config.trainers.mpirun = absl::GetFlag(FLAGS_mpirun);
  std::vector<std::string> mpirun_args =
      absl::StrSplit(absl::GetFlag(FLAGS_mpirun_args), ' ', absl::SkipEmpty());
  config.trainers.mpirun_args = std::move(mpirun_args);
  config.trainers.ranks_per_node = absl::GetFlag(FLAGS_np);
  config.trainers.seed = absl::GetFlag(FLAGS_seed);
  config.trainers.trainer_args = std::move(trainer_args);
  // STOKER_* settings reach every rank, also on other hosts once there are any.
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  config.trainers.exported_env = EnvironmentNamesWithPrefix(environment, "STOKER_");
  return config;
}

int Main(int argc, char** argv) {
  SetLogIdentity("launcher");
  absl::StatusOr<ParsedCommandLine> command_line =
      ParseFlags(absl::MakeConstSpan(argv + 1, argc - 1), kFlagsFile);
  if (!command_line.ok()) return UsageError(command_line.status().message());
  if (command_line->help) {
    std::printf("%s\nRuns one Stoker training job on this machine: the data service, then "
                "the trainers under mpirun.\n\nFlags:\n%s",
                kUsage, FlagsHelp(kFlagsFile).c_str());
    return 0;
  }

  absl::StatusOr<JobConfig> config = ConfigFromFlags(std::move(command_line->passed_on));
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

  JobResult result = RunJob(*plan);
  if (result.status.ok()) {
    LogInfo("job %s finished", plan->job_id);
  } else {
    LogError("job %s failed: %s", plan->job_id, result.status.message());
  }
  return result.exit_code;
}

}  // namespace
}  // namespace stoker::launcher

int main(int argc, char** argv) { return stoker::launcher::Main(argc, argv); }
