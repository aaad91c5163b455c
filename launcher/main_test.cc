// Drives the launcher binary as a user would: flags and their errors, --help, --dry_run,
// and whole jobs (with the fakes of launcher/testing/) stopped by a signal or a failure.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/child_process.h"
#include "launcher/job_files.h"
#include "launcher/launch_command.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::IsProcessAlive;
using ::stoker::launcher::testing::ListEntries;
using ::stoker::launcher::testing::MakeTempDir;
using ::stoker::launcher::testing::ReadFileOrEmpty;
using ::stoker::launcher::testing::ReadPidFiles;
using ::stoker::launcher::testing::WaitForFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

bool Exists(const std::string& path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = MakeTempDir("launcher");
    job_id_ = GenerateJobId();  // random: parallel runs share /tmp and /dev/shm
  }

  void TearDown() override {
    for (pid_t pid : ReadPidFiles(out_)) EXPECT_FALSE(IsProcessAlive(pid)) << "pid " << pid;
    EXPECT_FALSE(Exists("/tmp/stoker." + job_id_));
    EXPECT_THAT(ListEntries("/dev/shm", absl::StrCat("stoker.", job_id_, ".")), IsEmpty());
  }

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
    const std::string script = absl::StrCat("exec ", FormatCommand({}, argv), " >", out_,
                                            "/stdout 2>", out_, "/stderr");
    absl::StatusOr<ChildProcess> child =
        ChildProcess::Spawn({"launcher", "/bin/sh", {"sh", "-c", script}, env});
    EXPECT_TRUE(child.ok()) << child.status();
    return std::move(*child);
  }

  ExitStatus Run(const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
    ChildProcess launcher = Start(argv, std::move(env));
    absl::StatusOr<ExitStatus> status = launcher.Wait(absl::Seconds(60));
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? *status : ExitStatus::Lost();
  }

  std::string Stdout() { return ReadFileOrEmpty(out_ + "/stdout"); }
  std::string Stderr() { return ReadFileOrEmpty(out_ + "/stderr"); }

  std::string out_;
  std::string job_id_;
};

TEST_F(LauncherTest, HelpListsTheFlagsAndExitsZero) {
  EXPECT_EQ(Run({Runfile("launcher/launcher"), "--help"}), ExitStatus::Exited(0));
  EXPECT_THAT(Stdout(), HasSubstr("Usage: launcher [flags] -- [trainer flags]"));
  for (const char* flag : {"--np=1", "--trainer", "--data_service", "--mpirun=mpirun",
                           "--mpirun_args", "--seed=0", "--job_id", "--ready_timeout=1m",
                           "--dry_run=false", "--data_threads=0"}) {
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
      {{"--dataset=lmdb"}, "--dataset must be 'synthetic' or 'imagefolder'"},
      {{"--job_id=a.b"}, "--job_id 'a.b'"},
      {{"--ready_timeout=0s"}, "--ready_timeout must be > 0"},
      {{"--trainer=/nonexistent/trainer"}, "--trainer=/nonexistent/trainer"},
      {{"--mpirun=no-such-mpirun"}, "--mpirun=no-such-mpirun: not found on PATH"},
      {{"--", "--seed=3"}, "conflicts with the launcher"},
      {{"--mpirun_args=-np 4"}, "--mpirun_args must not set the rank count"},
      {{"--data_threads=-1"}, "--data_threads must be >= 0"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Run(LauncherWithFakes(c.args)), ExitStatus::Exited(2)) << c.args[0];
    EXPECT_THAT(Stderr(), HasSubstr(c.message)) << c.args[0];
  }
  EXPECT_FALSE(Exists(out_ + "/data_service.pid"));
}

TEST_F(LauncherTest, DryRunPrintsBothCommandsAndStartsNothing) {
  EXPECT_EQ(Run(LauncherWithFakes({"--dry_run", "--np=3", "--seed=5", "--mpirun_args=--bind-to none",
                                   "--dataset=synthetic", "--synthetic_samples=64", "--",
                                   "--epochs=2", "--model=small cnn"}),
                {"STOKER_TEST_SETTING=x"}),
            ExitStatus::Exited(0));
  const std::string socket = "/tmp/stoker." + job_id_ + "/data.sock";
  EXPECT_THAT(Stdout(), HasSubstr(absl::StrCat(
                            Runfile("launcher/fake_data_service"), " --socket=", socket,
                            " --job_id=", job_id_,
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
  EXPECT_FALSE(Exists(out_ + "/data_service.pid"));
}

TEST_F(LauncherTest, RunsAJobToTheEnd) {
  EXPECT_EQ(Run(LauncherWithFakes({"--np=2", "--", "--epochs=1"})), ExitStatus::Exited(0))
      << Stderr();
  EXPECT_THAT(Stderr(), HasSubstr("running: NCCL_NVLS_ENABLE=0 "));
  EXPECT_THAT(Stderr(), HasSubstr("job " + job_id_ + " finished"));
  EXPECT_TRUE(Exists(out_ + "/trainer.1.pid"));
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
            ExitStatus::Exited(9));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_THAT(Stderr(), HasSubstr("data service (pid "));
  EXPECT_THAT(Stderr(), HasSubstr("exited with code 9 while the trainers were running"));
}

TEST_F(LauncherTest, FailingTrainerExitCodeIsTheLaunchersExitCode) {
  EXPECT_EQ(Run(LauncherWithFakes({"--np=2"}), {"STOKER_FAKE_TRAINER_EXIT=6"}),
            ExitStatus::Exited(6));
  EXPECT_THAT(Stderr(), HasSubstr("mpirun (pid "));
}

TEST_F(LauncherTest, SigintStopsEverythingAndExits130) {
  ChildProcess launcher =
      Start(LauncherWithFakes({"--np=2"}), {"STOKER_FAKE_TRAINER_SLEEP=1000"});
  ASSERT_TRUE(WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(30)));
  ASSERT_TRUE(WaitForFile(out_ + "/trainer.1.sleep.pid", absl::Seconds(30)));
  kill(launcher.pid(), SIGINT);
  absl::StatusOr<ExitStatus> status = launcher.Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ExitStatus::Exited(128 + SIGINT));
  EXPECT_THAT(Stderr(), HasSubstr("interrupted by signal 2 (SIGINT)"));
}

TEST_F(LauncherTest, KillingTheLauncherTakesItsChildrenDown) {
  // SIGKILL allows no cleanup, but PR_SET_PDEATHSIG still ends the launcher's own children,
  // mpirun and the data service. Ranks are mpirun's children: ending them is mpirun's job
  // (and the trainer's own parent-death signal), so the fake ranks are left to the test.
  ChildProcess launcher =
      Start(LauncherWithFakes({"--np=1"}), {"STOKER_FAKE_TRAINER_SLEEP=1000"});
  ASSERT_TRUE(WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(30)));
  kill(launcher.pid(), SIGKILL);
  ASSERT_TRUE(launcher.Wait(absl::Seconds(10)).ok());
  const std::string pid_file[] = {"/data_service.pid", "/mpirun.pid"};
  for (const std::string& file : pid_file) {
    const pid_t pid = std::atoi(ReadFileOrEmpty(out_ + file).c_str());
    EXPECT_TRUE(testing::WaitForProcessExit(pid, absl::Seconds(5))) << file;
  }
  // What a SIGKILLed launcher cannot do, done here so TearDown finds a clean machine.
  for (pid_t pid : ReadPidFiles(out_)) kill(pid, SIGKILL);
  for (pid_t pid : ReadPidFiles(out_)) testing::WaitForProcessExit(pid, absl::Seconds(5));
  RemoveSharedMemoryLeftovers("/dev/shm", job_id_);
  const std::string job_dir = JobDirectoryPath("/tmp", job_id_);
  unlink((job_dir + "/data.sock").c_str());
  rmdir(job_dir.c_str());
}

}  // namespace
}  // namespace stoker::launcher
