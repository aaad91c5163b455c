// Drives the launcher binary as a user would: flags and their errors, --help, --dry_run,
// and whole jobs (with the fakes of launcher/testing/) stopped by a signal or a failure.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/launch_command.h"
#include "launcher/rank/child_process.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/job_owner.h"
#include "launcher/testing/job_leftovers.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::PathExists;
using ::stoker::launcher::testing::ReadFileOrEmpty;
using ::stoker::launcher::testing::ReadPidFiles;
using ::stoker::launcher::testing::Runfile;
using ::stoker::launcher::testing::WaitForFile;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(out_dir_, TempDir::Create("launcher"));
    out_ = out_dir_.path();
    job_id_ = GenerateJobId();  // random: parallel runs share /tmp and /dev/shm
  }

  void TearDown() override { testing::ExpectNothingLeftOfJob(out_, job_id_); }

  // The launcher with the fakes and this test's job id, then `args`.
  std::vector<std::string> LauncherWithFakes(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        Runfile("launcher/launcher"),
        "--data_service=" + Runfile("launcher/fake_data_service"),
        "--trainer=" + Runfile("launcher/testing/fake_trainer.sh"),
        "--mpirun=" + Runfile("launcher/testing/fake_mpirun.sh"),
        "--job_id=" + job_id_,
        "--shutdown_grace=2s",
    };
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // Starts `argv` with stdout and stderr going to files in out_.
  ChildProcess Start(const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
    env.push_back("STOKER_FAKE_OUT=" + out_);
    const std::string script =
        absl::StrCat("exec ", FormatCommand({}, argv), " >", out_, "/stdout 2>", out_, "/stderr");
    absl::StatusOr<ChildProcess> child =
        ChildProcess::Spawn({"launcher", "/bin/sh", {"sh", "-c", script}, env});
    EXPECT_OK(child);
    return std::move(*child);
  }

  ExitStatus Run(const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
    ChildProcess launcher = Start(argv, std::move(env));
    absl::StatusOr<ExitStatus> status = launcher.Wait(absl::Seconds(60));
    EXPECT_OK(status);
    return status.ok() ? *status : ExitStatus::Lost();
  }

  std::string Stdout() { return ReadFileOrEmpty(out_ + "/stdout"); }
  std::string Stderr() { return ReadFileOrEmpty(out_ + "/stderr"); }
  // The first line of stderr logged at the error level ("[launcher ...] E ..."), or "".
  std::string FirstErrorLine() {
    for (absl::string_view line : absl::StrSplit(Stderr(), '\n')) {
      if (absl::StrContains(line, "] E ")) return std::string(line);
    }
    return "";
  }

  TempDir out_dir_;
  std::string out_;
  std::string job_id_;
};

TEST_F(LauncherTest, HelpListsTheFlagsAndExitsZero) {
  EXPECT_EQ(Run({Runfile("launcher/launcher"), "--help"}), ExitStatus::Exited(0));
  EXPECT_THAT(Stdout(), HasSubstr("Usage: launcher [flags] -- [trainer flags]"));
  for (const char* flag : {"--np=1", "--trainer", "--data_service", "--mpirun=mpirun",
                           "--mpirun_args", "--seed=0", "--job_id", "--ready_timeout=1m",
                           "--dry_run=false", "--data_threads=0", "--data_service_args"}) {
    EXPECT_THAT(Stdout(), HasSubstr(flag));
  }
}

TEST_F(LauncherTest, UsageErrorsExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--np=0"}, "--np must be >= 1"},
      {{"--np=many"}, "--np=many is not a valid value"},
      {{"--bogus=1"}, "unknown flag --bogus"},
      {{"train.py"}, "unexpected argument 'train.py'"},
      {{"--dataset=lmdb"}, "--dataset must be 'synthetic', 'imagefolder' or 'packed'"},
      {{"--job_id=a.b"}, "--job_id 'a.b'"},
      {{"--ready_timeout=0s"}, "--ready_timeout must be > 0"},
      {{"--trainer=/nonexistent/trainer"}, "--trainer=/nonexistent/trainer"},
      {{"--mpirun=no-such-mpirun"}, "--mpirun=no-such-mpirun: not found on PATH"},
      {{"--", "--seed=3"}, "conflicts with the launcher"},
      {{"--mpirun_args=-np 4"}, "--mpirun_args must not set the rank count"},
      {{"--data_threads=-1"}, "--data_threads must be >= 0"},
      {{"--data_service_args=--bad_files fail"},
       "--data_service_args: '--bad_files' is not a flag with a value"},
      {{"--data_service_args=--socket=/tmp/x"}, "--data_service_args must not set --socket"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Run(LauncherWithFakes(c.args)), ExitStatus::Exited(2)) << c.args[0];
    EXPECT_THAT(Stderr(), HasSubstr(c.message)) << c.args[0];
  }
  EXPECT_FALSE(PathExists(out_ + "/data_service.pid"));
}

TEST_F(LauncherTest, DryRunPrintsBothCommandsAndStartsNothing) {
  EXPECT_EQ(
      Run(LauncherWithFakes({"--dry_run", "--np=3", "--seed=5", "--mpirun_args=--bind-to none",
                             "--dataset=synthetic", "--synthetic_samples=64", "--", "--epochs=2",
                             "--model=small cnn"}),
          {"STOKER_TEST_SETTING=x"}),
      ExitStatus::Exited(0));
  const std::string socket = "/tmp/stoker." + job_id_ + "/data.sock";
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(Runfile("launcher/fake_data_service"),
                                               " --socket=", socket, " --job_id=", job_id_,
                                               " --node_id=0 --data_seed=5 --dataset=synthetic "
                                               "--synthetic_samples=64\n")));
  // Every STOKER_* variable of the launcher's environment is exported to the ranks; which
  // ones there are depends on the test's environment, so they are checked one by one.
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat("NCCL_NVLS_ENABLE=0 ",
                                               Runfile("launcher/testing/fake_mpirun.sh"),
                                               " -np 3 --bind-to none -x NCCL_NVLS_ENABLE -x ")));
  EXPECT_THAT(Stdout(), HasSubstr(" -x STOKER_TEST_SETTING "));
  EXPECT_THAT(Stdout(), HasSubstr(" -x STOKER_FAKE_OUT "));
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(" ", Runfile("launcher/testing/fake_trainer.sh"),
                                               " --data_socket=", socket,
                                               " --seed=5 --epochs=2 '--model=small cnn'\n")));
  EXPECT_FALSE(PathExists(out_ + "/data_service.pid"));
}

TEST_F(LauncherTest, DataServiceArgsFollowTheLaunchersDataServiceFlags) {
  EXPECT_EQ(Run(LauncherWithFakes(
                {"--dry_run", "--seed=5", "--dataset=synthetic", "--data_threads=4",
                 "--data_service_args= --bad_files=fail  --threads=1 ", "--", "--epochs=2"})),
            ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(
                            Runfile("launcher/fake_data_service"), " --socket=/tmp/stoker.",
                            job_id_, "/data.sock --job_id=", job_id_,
                            " --node_id=0 --data_seed=5 --dataset=synthetic --threads=4 "
                            "--bad_files=fail --threads=1\n")));
  // In the cluster modes they travel in the trainers' --data_service_args.
  EXPECT_EQ(Run(LauncherWithFakes({"--dry_run", "--hosts=gpu1:2", "--dataset=synthetic",
                                   "--data_service_args=--jpeg_decode=exact", "--", "--epochs=2"})),
            ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stdout(),
              HasSubstr(" '--data_service_args=--dataset=synthetic --jpeg_decode=exact' "));
}

TEST_F(LauncherTest, DryRunWithHostsPrintsMpirunDashH) {
  EXPECT_EQ(
      Run(LauncherWithFakes({"--dry_run", "--hosts=gpu1:4,gpu2:4", "--seed=3",
                             "--dataset=synthetic", "--synthetic_samples=64", "--", "--epochs=2"}),
          {"LD_LIBRARY_PATH=/opt/lib"}),
      ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stdout(), HasSubstr("(hosts mode): every node's local rank 0 starts that node's "
                                  "data service\n"));
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat("NCCL_NVLS_ENABLE=0 ",
                                               Runfile("launcher/testing/fake_mpirun.sh"),
                                               " -np 8 -H gpu1:4,gpu2:4 -x NCCL_NVLS_ENABLE -x ")));
  EXPECT_THAT(Stdout(), HasSubstr(" -x LD_LIBRARY_PATH "));
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(
                            " ", Runfile("launcher/testing/fake_trainer.sh"), " --job_id=", job_id_,
                            " --seed=3 --data_service=", Runfile("launcher/fake_data_service"),
                            " '--data_service_args=--dataset=synthetic --synthetic_samples=64' "
                            "--epochs=2\n")));
  EXPECT_THAT(Stdout(), Not(HasSubstr("--socket=")));
}

TEST_F(LauncherTest, DryRunWithHostfileAndNpPlacesRanksPerNode) {
  const std::string hostfile = out_ + "/hosts";
  { std::ofstream(hostfile) << "# two nodes\nnode-a slots=8\nnode-b slots=8\n"; }
  EXPECT_EQ(Run(LauncherWithFakes({"--dry_run", "--hostfile=" + hostfile, "--np=2",
                                   "--mpirun_args=--mca btl tcp,self"})),
            ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(Runfile("launcher/testing/fake_mpirun.sh"),
                                               " -np 4 --hostfile ", hostfile,
                                               " --map-by ppr:2:node --mca btl tcp,self -x ")));
}

TEST_F(LauncherTest, DryRunInsideSlurmPrintsSrunFromTheAllocation) {
  const std::string srun = out_ + "/srun";
  { std::ofstream(srun) << "#!/bin/sh\nexit 1\n"; }
  chmod(srun.c_str(), 0755);
  EXPECT_EQ(Run(LauncherWithFakes({"--dry_run", "--srun=" + srun, "--srun_args=--mpi=pmix",
                                   "--dataset=synthetic", "--", "--epochs=1"}),
                {"SLURM_JOB_ID=77", "SLURM_JOB_NUM_NODES=2", "SLURM_NTASKS_PER_NODE=4",
                 "SLURM_GPUS_ON_NODE=4", "SLURM_CPUS_PER_TASK=6"}),
            ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stdout(), HasSubstr("(slurm mode)"));
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(
                            "NCCL_NVLS_ENABLE=0 ", srun,
                            " --nodes=2 --ntasks=8 --ntasks-per-node=4 --kill-on-bad-exit=1 "
                            "--export=ALL --cpus-per-task=6 --gpu-bind=none --mpi=pmix ",
                            Runfile("launcher/testing/fake_trainer.sh"), " --job_id=", job_id_,
                            " --seed=0 --data_service=", Runfile("launcher/fake_data_service"),
                            " --data_service_args=--dataset=synthetic --epochs=1\n")));
}

TEST_F(LauncherTest, ModeLocalInsideSlurmStaysOnThisMachine) {
  EXPECT_EQ(Run(LauncherWithFakes({"--dry_run", "--mode=local", "--np=2"}),
                {"SLURM_JOB_ID=77", "SLURM_JOB_NUM_NODES=2"}),
            ExitStatus::Exited(0));
  EXPECT_THAT(Stdout(), HasSubstr(" -np 2 "));
  EXPECT_THAT(Stdout(), HasSubstr("--data_socket=/tmp/stoker." + job_id_ + "/data.sock"));
}

TEST_F(LauncherTest, ClusterUsageErrorsExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    std::string message;
  };
  const Case cases[] = {
      {{"--mode=slurm"}, {}, "SLURM_JOB_ID is not set"},
      {{"--hosts=a:2", "--hostfile=/x"}, {}, "--hostfile and --hosts both"},
      {{"--hosts=a:2,a:2"}, {}, "--hosts names a twice"},
      {{"--hosts=a,b"}, {}, "host a states no slot count"},
      {{"--hostfile=/nonexistent/hosts"}, {}, "--hostfile /nonexistent/hosts: cannot read it"},
      {{"--np=16"},
       {"SLURM_JOB_ID=5", "SLURM_NNODES=1", "SLURM_GPUS_ON_NODE=8"},
       "16 ranks per node (--np) but Slurm job 5 has 8 GPU(s) per node"},
      {{"--srun_args=-n 4"},
       {"SLURM_JOB_ID=5", "SLURM_NNODES=1", "SLURM_NTASKS_PER_NODE=2"},
       "--srun_args must not set the rank count"},
      {{"--hosts=a:2", "--", "--job_id=x"}, {}, "conflicts with the launcher"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Run(LauncherWithFakes(c.args), c.env), ExitStatus::Exited(2)) << c.args[0];
    EXPECT_THAT(Stderr(), HasSubstr(c.message)) << c.args[0];
  }
}

TEST_F(LauncherTest, ARequeuedSlurmJobSaysSoAndWhetherItsTrainersCanResume) {
  const std::vector<std::string> slurm = {"SLURM_JOB_ID=77", "SLURM_JOB_NUM_NODES=1",
                                          "SLURM_NTASKS_PER_NODE=2", "SLURM_RESTART_COUNT=2"};
  const std::string srun = "--srun=" + Runfile("launcher/testing/fake_srun.sh");
  EXPECT_EQ(Run(LauncherWithFakes({srun, "--", "--checkpoint_dir=" + out_ + "/ckpt"}), slurm),
            ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stderr(), HasSubstr("I SLURM_RESTART_COUNT=2: a requeued job; the trainers resume "
                                  "from the newest checkpoint of their --checkpoint_dir"));
  EXPECT_EQ(Run(LauncherWithFakes({srun, "--", "--epochs=1"}), slurm), ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stderr(), HasSubstr("W SLURM_RESTART_COUNT=2: a requeued job, but the trainers "
                                  "have no --checkpoint_dir: they start afresh"));
}

TEST_F(LauncherTest, DoctorIsASubcommand) {
  EXPECT_EQ(Run({Runfile("launcher/launcher"), "doctor", "--np=x"}), ExitStatus::Exited(2));
  EXPECT_THAT(Stderr(), HasSubstr("doctor: --np=x must be a positive number"));
  EXPECT_EQ(Run({Runfile("launcher/launcher"), "--help"}), ExitStatus::Exited(0));
  EXPECT_THAT(Stdout(), HasSubstr("launcher doctor [--np=N]"));
  for (const char* flag : {"--hostfile", "--hosts", "--mode=auto", "--srun=srun", "--srun_args"}) {
    EXPECT_THAT(Stdout(), HasSubstr(flag));
  }
}

TEST_F(LauncherTest, RunsAJobToTheEnd) {
  EXPECT_EQ(Run(LauncherWithFakes({"--np=2", "--", "--epochs=1"})), ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stderr(), HasSubstr("running: NCCL_NVLS_ENABLE=0 "));
  EXPECT_THAT(Stderr(), HasSubstr("job " + job_id_ + " finished"));
  EXPECT_TRUE(PathExists(out_ + "/trainer.1.pid"));
}

TEST_F(LauncherTest, GeneratesAJobIdWhenNoneIsGiven) {
  std::vector<std::string> argv = LauncherWithFakes({"--dry_run"});
  argv.erase(std::remove(argv.begin(), argv.end(), "--job_id=" + job_id_), argv.end());
  EXPECT_EQ(Run(argv), ExitStatus::Exited(0));
  EXPECT_THAT(Stdout(), HasSubstr("--socket=/tmp/stoker."));
  EXPECT_THAT(Stdout(), Not(HasSubstr(job_id_)));
}

TEST_F(LauncherTest, DataServiceDyingEndsTheJobNamingIt) {
  const absl::Time start = absl::Now();
  EXPECT_EQ(Run(LauncherWithFakes({"--np=2"}), {"STOKER_FAKE_DATA_SERVICE=exit_after_ready:9:300",
                                                "STOKER_FAKE_TRAINER_SLEEP=1000"}),
            ExitStatus::Exited(69));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  // The first error line names the cause, the exit code and the process.
  EXPECT_THAT(FirstErrorLine(), HasSubstr("E peer lost (exit 69): data service (pid "));
  EXPECT_THAT(FirstErrorLine(), HasSubstr("exited with code 9 while the trainers were running"));
}

TEST_F(LauncherTest, FailingTrainerExitCodeIsTheLaunchersExitCode) {
  EXPECT_EQ(Run(LauncherWithFakes({"--np=2"}), {"STOKER_FAKE_TRAINER_EXIT=6"}),
            ExitStatus::Exited(6));
  EXPECT_THAT(Stderr(), HasSubstr("mpirun (pid "));
}

TEST_F(LauncherTest, SigintStopsEverythingAndExits130) {
  ChildProcess launcher = Start(LauncherWithFakes({"--np=2"}), {"STOKER_FAKE_TRAINER_SLEEP=1000"});
  ASSERT_TRUE(WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(30)));
  ASSERT_TRUE(WaitForFile(out_ + "/trainer.1.sleep.pid", absl::Seconds(30)));
  kill(launcher.pid(), SIGINT);
  absl::StatusOr<ExitStatus> status = launcher.Wait(absl::Seconds(30));
  ASSERT_OK(status);
  EXPECT_EQ(*status, ExitStatus::Exited(128 + SIGINT));
  EXPECT_THAT(Stderr(), HasSubstr("interrupted by signal 2 (SIGINT)"));
}

TEST_F(LauncherTest, KillingTheLauncherTakesItsChildrenDown) {
  // SIGKILL allows no cleanup, but PR_SET_PDEATHSIG still ends the launcher's own children,
  // mpirun and the data service. Ranks are mpirun's children: ending them is mpirun's job
  // (and the trainer's own parent-death signal), so the fake ranks are left to the test.
  ChildProcess launcher = Start(LauncherWithFakes({"--np=1"}), {"STOKER_FAKE_TRAINER_SLEEP=1000"});
  ASSERT_TRUE(WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(30)));
  kill(launcher.pid(), SIGKILL);
  ASSERT_OK(launcher.Wait(absl::Seconds(10)));
  const std::string pid_file[] = {"/data_service.pid", "/mpirun.pid"};
  for (const std::string& file : pid_file) {
    const pid_t pid = std::atoi(ReadFileOrEmpty(out_ + file).c_str());
    EXPECT_TRUE(testing::WaitForProcessExit(pid, absl::Seconds(5))) << file;
  }
  // What a SIGKILLed launcher cannot do, done here so TearDown finds a clean machine.
  for (pid_t pid : ReadPidFiles(out_)) kill(pid, SIGKILL);
  for (pid_t pid : ReadPidFiles(out_)) testing::WaitForProcessExit(pid, absl::Seconds(5));
  RemoveSharedMemoryLeftovers("/dev/shm", job_id_);
  // The owner record stays for the next launcher to judge (Note [Stale jobs]).
  const std::string owner_record = JobOwnerPath("/tmp", job_id_);
  EXPECT_TRUE(PathExists(owner_record));
  unlink(owner_record.c_str());
  const std::string job_dir = JobDirectoryPath("/tmp", job_id_);
  unlink((job_dir + "/data.sock").c_str());
  rmdir(job_dir.c_str());
}

}  // namespace
}  // namespace stoker::launcher
