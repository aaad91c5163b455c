#include "launcher/flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/flag_binding.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "launcher/rank/data_service_args.h"

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
ABSL_FLAG(std::string, srun, "srun",
          "srun program (Slurm mode); a bare name is looked up on PATH.");
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
ABSL_FLAG(std::string, train_dir, "",
          "Data service --train_dir: the folder (imagefolder) or the index file (packed).");
ABSL_FLAG(std::string, val_dir, "",
          "Data service --val_dir: the folder (imagefolder) or the index file (packed).");
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
          "After SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2: how long the ranks may take to stop at a "
          "step boundary with a checkpoint (they get SIGUSR2 through mpirun or srun) before they "
          "are stopped. Keep it below the scheduler's warning (the Slurm templates ask for SIGUSR1 "
          "120 s before the time limit) less --shutdown_grace. 0: stop them at once.");
ABSL_FLAG(bool, dry_run, false, "Print the commands the job would run, then exit 0.");
ABSL_FLAG(std::string, trace, "",
          "If set, a directory (on a file system every host shares): every rank and data service "
          "writes a Chrome trace of the traced steps there (the trainers' --trace), rank 0 gives "
          "each traced step's verdict, and at the job's end the launcher merges them into "
          "DIR/job_trace.json on one clock (as `launcher trace merge DIR` does).");
ABSL_FLAG(
    std::string, trace_steps, "",
    "With --trace: the trainers' --trace_steps=A:B, the optimizer steps traced (empty: the 10 "
    "after the warm-up).");

namespace stoker::launcher {
namespace {

// The launcher's own flags (this file's), in the launcher's wording; `--` ends them.
FlagSpec LauncherFlagSpec() {
  FlagSpec spec = FlagSpecOf("launcher", "launcher/flags.cc");
  spec.passed_on = true;
  spec.positional_hint = "trainer flags go after '--'";
  spec.wording = FlagWording::kSentence;
  return spec;
}

std::vector<std::string> SplitOnSpaces(const std::string& text) {
  return absl::StrSplit(text, ' ', absl::SkipEmpty());
}

}  // namespace

const char kLauncherUsage[] =
    "Usage: launcher [flags] -- [trainer flags]\n"
    "       launcher doctor [--np=N] [--batch_size=B] [--image_size=S] [--ring_slots=K] "
    "[--mpirun=PROGRAM]\n"
    "       launcher trace merge DIR [--out=FILE]\n";

absl::StatusOr<LauncherCommandLine> ParseLauncherCommandLine(absl::Span<const std::string> args) {
  LauncherCommandLine result;
  ASSIGN_OR_RETURN(const ParsedFlags parsed, ParseFlags(args, LauncherFlagSpec()));
  result.help = parsed.help;
  if (result.help) return result;

  LauncherOptions& o = result.options;
  RETURN_IF_ERROR(ApplyFlagBindings({
      {FLAGS_mode, &o.placement.mode},
      {FLAGS_np, &o.placement.ranks_per_node},
      {FLAGS_hostfile, &o.placement.hostfile},
      {FLAGS_hosts, &o.placement.hosts},
      {FLAGS_mpirun, &o.placement.mpirun},
      {FLAGS_mpirun_args, &o.placement.mpirun_args, SplitOnSpaces},
      {FLAGS_srun, &o.placement.srun},
      {FLAGS_srun_args, &o.placement.srun_args, SplitOnSpaces},

      {FLAGS_trace, &o.trace_dir},
      {FLAGS_trace_steps, &o.trace_steps},
      {FLAGS_dataset, &o.data.dataset},
      {FLAGS_train_dir, &o.data.train_dir},
      {FLAGS_val_dir, &o.data.val_dir},
      {FLAGS_synthetic_samples, &o.data.synthetic_samples},
      {FLAGS_synthetic_classes, &o.data.synthetic_classes},
      {FLAGS_data_threads, &o.data.threads},
      {FLAGS_data_prefetch, &o.data.prefetch},
      {FLAGS_data_service_args, &o.data.extra_args, ParseDataServiceArgs},

      {FLAGS_trainer, &o.trainer},
      {FLAGS_data_service, &o.data_service},
      {FLAGS_seed, &o.seed},
      {FLAGS_job_id, &o.job_id},
      {FLAGS_ready_timeout, &o.ready_timeout},
      {FLAGS_shutdown_grace, &o.shutdown_grace},
      {FLAGS_stop_grace, &o.stop_grace},
      {FLAGS_dry_run, &o.dry_run},
  }));
  o.placement.ranks_per_node_given = parsed.given.count("np") > 0;
  o.trainer_args = parsed.passed_on;
  RETURN_IF_ERROR(o.Validate());
  return result;
}

std::string LauncherHelp() {
  return absl::StrCat(
      kLauncherUsage,
      "\nRuns one Stoker training job: on this machine (the data service, then the "
      "trainers under mpirun), on several hosts under mpirun (--hostfile, --hosts), or "
      "under srun inside a Slurm allocation (each node's local rank 0 then starts the "
      "node's data service). `launcher doctor` checks this machine.\n\nFlags:\n",
      FlagsHelp(LauncherFlagSpec()));
}

}  // namespace stoker::launcher
