#include "launcher/job.h"
#include "common/exit_codes.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/program_paths.h"
#include "launcher/testing/job_leftovers.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::PathExists;
using ::stoker::launcher::testing::ReadFileOrEmpty;
using ::stoker::launcher::testing::Runfile;
using ::stoker::launcher::testing::WaitForFile;
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string SearchPath() {
  const char* path = std::getenv("PATH");
  return path != nullptr ? path : "/usr/bin:/bin";
}

std::vector<std::string> Lines(const std::string& path) {
  return absl::StrSplit(ReadFileOrEmpty(path), '\n', absl::SkipEmpty());
}

// Runs jobs made of the fakes in launcher/testing/: fake_data_service, fake_mpirun.sh and
// fake_trainer.sh, which record pids and arguments into out_.
class JobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(out_dir_, TempDir::Create("job"));
    out_ = out_dir_.path();
    // Random: parallel runs of this test share /tmp and /dev/shm, and may share pids too
    // (each runs in a pid namespace of its own).
    config_.job_id = GenerateJobId();
    config_.data_service.program = Runfile("launcher/fake_data_service");
    config_.trainers.mpirun = Runfile("launcher/testing/fake_mpirun.sh");
    config_.trainers.trainer = Runfile("launcher/testing/fake_trainer.sh");
    config_.trainers.ranks_per_node = 2;
    config_.trainers.seed = 7;
    config_.trainers.exported_env = {"STOKER_FAKE_OUT"};
    config_.trainers.trainer_args = {"--epochs=1", "--name=a b"};
    config_.data_service.data_seed = 7;
    config_.data_service.dataset = "synthetic";
    config_.env = {absl::StrCat("STOKER_FAKE_OUT=", out_)};
    config_.search_path = SearchPath();
    config_.ready_timeout = absl::Seconds(20);
    config_.shutdown_grace = absl::Seconds(5);
  }

  void TearDown() override {
    // No process of the job is left, and neither are its files.
    testing::ExpectNothingLeftOfJob(out_, config_.job_id);
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "a child of the test is left";
  }

  void SetEnv(const std::string& name, const std::string& value) {
    config_.env.push_back(absl::StrCat(name, "=", value));
  }

  // Runs the job with the fake data service told to `behave` (its STOKER_FAKE_DATA_SERVICE:
  // "never_ready", "exit_before_ready:CODE", ...).
  JobResult RunWithDataService(const std::string& behave) {
    SetEnv("STOKER_FAKE_DATA_SERVICE", behave);
    return Run();
  }

  // The fake trainer's ranks sleep (1000 s) instead of exiting: the job trains until
  // something ends it.
  void KeepTheRanksTraining() { SetEnv("STOKER_FAKE_TRAINER_SLEEP", "1000"); }

  // A thread that sends this process (the launcher's job) SIGTERM, or `signal`, once both
  // of the fake trainer's ranks have started sleeping: each has set its stop trap by then.
  // Join it after Run().
  std::thread SigtermOnceRanksSleep() { return SignalOnceRanksSleep(SIGTERM); }
  std::thread SignalOnceRanksSleep(int signal) {
    return std::thread([this, signal] {
      if (WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(20)) &&
          WaitForFile(out_ + "/trainer.1.sleep.pid", absl::Seconds(20))) {
        kill(getpid(), signal);
      }
    });
  }

  // `signal` to the launcher's job while the ranks train: each rank stops with its
  // "checkpoint" (1 s) within the stop grace, and the job exits 128 + `signal`.
  void ExpectTheRanksStopWithACheckpointOn(int signal) {
    KeepTheRanksTraining();
    SetEnv("STOKER_FAKE_TRAINER_STOP_S", "1");
    config_.stop_grace = absl::Seconds(30);
    std::thread sender = SignalOnceRanksSleep(signal);
    JobResult result = Run();
    sender.join();
    EXPECT_EQ(result.exit_code, 128 + signal);
    EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kCancelled));
    EXPECT_THAT(std::string(result.status.message()), HasSubstr(DescribeSignal(signal)));
    for (const char* rank : {"0", "1"}) {
      EXPECT_EQ(ReadFileOrEmpty(absl::StrCat(out_, "/trainer.", rank, ".stopped")), "stopped\n")
          << rank;
    }
    EXPECT_LT(elapsed_, absl::Seconds(20));
  }

  JobResult Run() {
    absl::StatusOr<JobPlan> plan = PlanJob(config_);
    EXPECT_OK(plan);
    if (!plan.ok()) return JobResult{plan.status(), 1};
    const absl::Time start = absl::Now();
    JobResult result = RunJob(*plan);
    elapsed_ = absl::Now() - start;
    return result;
  }

  pid_t PidFrom(const std::string& file) {
    int pid = -1;
    EXPECT_TRUE(
        absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFileOrEmpty(out_ + "/" + file)), &pid))
        << file;
    return pid;
  }

  TempDir out_dir_;
  std::string out_;
  JobConfig config_;
  absl::Duration elapsed_;
};

TEST_F(JobTest, SuccessfulJobRunsBothProgramsAndCleansUp) {
  JobResult result = Run();
  EXPECT_OK(result.status);
  EXPECT_EQ(result.exit_code, 0);

  const std::string socket = DataSocketPath("/tmp", config_.job_id);
  EXPECT_THAT(Lines(out_ + "/data_service.args"),
              ElementsAre("--socket=" + socket, "--job_id=" + config_.job_id, "--node_id=0",
                          "--data_seed=7", "--dataset=synthetic"));
  EXPECT_THAT(Lines(out_ + "/mpirun.args"),
              ElementsAre("-np", "2", "-x", "NCCL_NVLS_ENABLE", "-x", "STOKER_FAKE_OUT",
                          config_.trainers.trainer, "--data_socket=" + socket, "--seed=7",
                          "--epochs=1", "--name=a b"));
  for (int rank : {0, 1}) {
    EXPECT_THAT(Lines(absl::StrCat(out_, "/trainer.", rank, ".args")),
                ElementsAre("--data_socket=" + socket, "--seed=7", "--epochs=1", "--name=a b"));
    EXPECT_EQ(ReadFileOrEmpty(absl::StrCat(out_, "/trainer.", rank, ".env")),
              "NCCL_NVLS_ENABLE=0\n");
  }
  EXPECT_EQ(ReadFileOrEmpty(out_ + "/data_service.env"), "0\n");
}

TEST_F(JobTest, AStreamSocketCountsAsReadyToo) {
  SetEnv("STOKER_FAKE_SOCKET_TYPE", "stream");
  JobResult result = Run();
  EXPECT_EQ(result.exit_code, 0) << result.status;
  EXPECT_TRUE(PathExists(out_ + "/trainer.1.pid"));
}

TEST_F(JobTest, NvlsStaysOffWhateverTheEnvironmentSays) {
  SetEnv("NCCL_NVLS_ENABLE", "1");
  JobResult result = Run();
  EXPECT_EQ(result.exit_code, 0) << result.status;
  EXPECT_EQ(ReadFileOrEmpty(out_ + "/trainer.0.env"), "NCCL_NVLS_ENABLE=0\n");
}

TEST_F(JobTest, LeftoversOfTheDataServiceAreRemoved) {
  JobResult result = RunWithDataService("leak_on_term");
  EXPECT_EQ(result.exit_code, 0) << result.status;
  // TearDown checks that the socket, the directory and the segment are gone.
}

TEST_F(JobTest, DataServiceExitingBeforeReadyIsAPeerLostAndNoTrainerStarts) {
  JobResult result = RunWithDataService("exit_before_ready:7");
  EXPECT_EQ(result.exit_code, kExitPeerLost);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kUnavailable));
  const pid_t data_service = PidFrom("data_service.pid");
  EXPECT_THAT(std::string(result.status.message()),
              HasSubstr(absl::StrCat("data service (pid ", data_service, ") exited with code 7")));
  EXPECT_FALSE(PathExists(out_ + "/mpirun.pid"));
}

TEST_F(JobTest, DataServiceRefusingItsFlagsFailsTheJobAsABadFlag) {
  JobResult result = RunWithDataService("exit_before_ready:2");
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_FALSE(PathExists(out_ + "/mpirun.pid"));
}

TEST_F(JobTest, DataServiceNeverReadyTimesOut) {
  config_.ready_timeout = absl::Milliseconds(500);
  JobResult result = RunWithDataService("never_ready");
  EXPECT_EQ(result.exit_code, kExitTimeout);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("--ready_timeout"));
  EXPECT_FALSE(PathExists(out_ + "/mpirun.pid"));
  EXPECT_LT(elapsed_, absl::Seconds(5));
}

TEST_F(JobTest, DataServiceDyingDuringTrainingStopsMpirunAndNamesIt) {
  KeepTheRanksTraining();
  JobResult result = RunWithDataService("exit_after_ready:9:300");
  EXPECT_EQ(result.exit_code, kExitPeerLost);
  const pid_t data_service = PidFrom("data_service.pid");
  EXPECT_THAT(std::string(result.status.message()),
              HasSubstr(absl::StrCat("data service (pid ", data_service,
                                     ") exited with code 9 while the trainers were running")));
  EXPECT_LT(elapsed_, absl::Seconds(10));
  // The trainers and their sleeping children had started; TearDown checks they are gone.
  EXPECT_TRUE(PathExists(out_ + "/trainer.1.sleep.pid"));
}

TEST_F(JobTest, DataServiceKilledBySignalReportsTheSignal) {
  KeepTheRanksTraining();
  JobResult result = RunWithDataService("crash_after_ready:300");
  EXPECT_EQ(result.exit_code, kExitPeerLost);
  EXPECT_THAT(std::string(result.status.message()),
              HasSubstr("killed by signal 11 (SIGSEGV) while the trainers were running"));
}

TEST_F(JobTest, DataServiceKilledByItsSandboxSaysSo) {
  KeepTheRanksTraining();
  JobResult result = RunWithDataService(absl::StrCat("crash_after_ready:300:", SIGSYS));
  EXPECT_EQ(result.exit_code, kExitPeerLost);
  EXPECT_THAT(std::string(result.status.message()),
              HasSubstr("killed by signal 31, killed by its sandbox (its log names the "
                        "system call) while the trainers were running"));
}

TEST_F(JobTest, FailingTrainerReturnsMpirunsCodeAndStopsTheDataService) {
  SetEnv("STOKER_FAKE_TRAINER_EXIT", "3");
  SetEnv("STOKER_FAKE_TRAINER_FAILING_RANK", "1");
  JobResult result = Run();
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kUnavailable));
  const pid_t mpirun = PidFrom("mpirun.pid");
  EXPECT_THAT(std::string(result.status.message()),
              HasSubstr(absl::StrCat("mpirun (pid ", mpirun, ") exited with code 3")));
}

TEST_F(JobTest, DataServiceFailingAtShutdownFailsTheJob) {
  JobResult result = RunWithDataService("fail_on_term:5");
  EXPECT_EQ(result.exit_code, 5);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("exited with code 5 after SIGTERM"));
}

TEST_F(JobTest, DataServiceIgnoringSigtermIsKilledAfterTheGracePeriod) {
  config_.shutdown_grace = absl::Milliseconds(300);
  JobResult result = RunWithDataService("ignore_term");
  EXPECT_EQ(result.exit_code, 128 + SIGKILL);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_LT(elapsed_, absl::Seconds(5));
}

TEST_F(JobTest, SigtermStopsTheJobAndExitsWith143) {
  KeepTheRanksTraining();
  std::thread sender = SigtermOnceRanksSleep();
  JobResult result = Run();
  sender.join();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("SIGTERM"));
  EXPECT_LT(elapsed_, absl::Seconds(10));
}

TEST_F(JobTest, SigtermLetsTheRanksStopWithACheckpointBeforeAnythingIsKilled) {
  // Each rank's "checkpoint" takes 6 s, more than --shutdown_grace (5 s here): only the
  // stop grace lets it finish.
  KeepTheRanksTraining();
  SetEnv("STOKER_FAKE_TRAINER_STOP_S", "6");
  config_.stop_grace = absl::Seconds(30);
  std::thread sender = SigtermOnceRanksSleep();
  JobResult result = Run();
  sender.join();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kCancelled));
  for (const char* rank : {"0", "1"}) {
    EXPECT_EQ(ReadFileOrEmpty(absl::StrCat(out_, "/trainer.", rank, ".stopped")), "stopped\n")
        << rank;
  }
  EXPECT_GE(elapsed_, absl::Seconds(6));
  EXPECT_LT(elapsed_, absl::Seconds(20));
}

// Slurm's warning before the time limit (--signal=B:USR1@N) stops the job as SIGTERM does:
// the ranks stop with a checkpoint, and the job exits 128 + the signal (138, 140).
TEST_F(JobTest, Sigusr1LetsTheRanksStopWithACheckpointAndExitsWith138) {
  ExpectTheRanksStopWithACheckpointOn(SIGUSR1);
}

TEST_F(JobTest, Sigusr2LetsTheRanksStopWithACheckpointAndExitsWith140) {
  ExpectTheRanksStopWithACheckpointOn(SIGUSR2);
}

TEST_F(JobTest, RanksThatDoNotStopWithinTheStopGraceAreStopped) {
  KeepTheRanksTraining();
  SetEnv("STOKER_FAKE_TRAINER_STOP_S", "1000");
  config_.stop_grace = absl::Seconds(1);
  config_.shutdown_grace = absl::Seconds(1);
  std::thread sender = SigtermOnceRanksSleep();
  JobResult result = Run();
  sender.join();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_FALSE(PathExists(out_ + "/trainer.0.stopped"));
  EXPECT_LT(elapsed_, absl::Seconds(10));
}

TEST_F(JobTest, ExistingJobDirectoryIsRefusedAndLeftAlone) {
  const std::string dir = JobDirectoryPath("/tmp", config_.job_id);
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  JobResult result = Run();
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_TRUE(PathExists(dir));
  EXPECT_FALSE(PathExists(out_ + "/data_service.pid"));
  rmdir(dir.c_str());
}

// The same job under the real Open MPI mpirun, whose ranks live in process groups of their
// own: what reaches them goes through mpirun.
class RealMpirunJobTest : public JobTest {
 protected:
  void SetUp() override {
    JobTest::SetUp();
    if (!ResolveProgram("mpirun", SearchPath(), "--mpirun").ok()) {
      GTEST_SKIP() << "needs mpirun (Open MPI) on PATH";
    }
    config_.trainers.mpirun = "mpirun";
    SetEnv("OMPI_ALLOW_RUN_AS_ROOT", "1");
    SetEnv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    SetEnv("OMPI_MCA_rmaps_base_oversubscribe", "1");
    SetEnv("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
  }
};

TEST_F(RealMpirunJobTest, RanksGetSocketSeedAndExportedEnvironment) {
  JobResult result = Run();
  ASSERT_EQ(result.exit_code, 0) << result.status;
  const std::string socket = DataSocketPath("/tmp", config_.job_id);
  for (int rank : {0, 1}) {
    EXPECT_THAT(Lines(absl::StrCat(out_, "/trainer.", rank, ".args")),
                ElementsAre("--data_socket=" + socket, "--seed=7", "--epochs=1", "--name=a b"));
    EXPECT_EQ(ReadFileOrEmpty(absl::StrCat(out_, "/trainer.", rank, ".env")),
              "NCCL_NVLS_ENABLE=0\n");
  }
}

TEST_F(RealMpirunJobTest, FailingRankMakesTheJobFail) {
  SetEnv("STOKER_FAKE_TRAINER_EXIT", "4");
  SetEnv("STOKER_FAKE_TRAINER_FAILING_RANK", "0");
  SetEnv("STOKER_FAKE_TRAINER_SLEEP", "0");
  JobResult result = Run();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("mpirun (pid"));
}

TEST_F(RealMpirunJobTest, SigtermReachesTheRanksThroughMpirun) {
  KeepTheRanksTraining();
  std::thread sender([this] {
    if (WaitForFile(out_ + "/trainer.1.sleep.pid", absl::Seconds(30)) &&
        WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(30))) {
      kill(getpid(), SIGINT);
    }
  });
  JobResult result = Run();
  sender.join();
  EXPECT_EQ(result.exit_code, 128 + SIGINT);
  EXPECT_LT(elapsed_, absl::Seconds(20));
  // mpirun passed the stop at a step boundary (SIGUSR2) on to both ranks.
  EXPECT_TRUE(PathExists(out_ + "/trainer.0.stopped"));
  EXPECT_TRUE(PathExists(out_ + "/trainer.1.stopped"));
}

TEST_F(RealMpirunJobTest, RanksOrphanedByAKilledMpirunAreKilled) {
  KeepTheRanksTraining();
  std::thread killer([this] {
    if (WaitForFile(out_ + "/trainer.1.sleep.pid", absl::Seconds(30)) &&
        WaitForFile(out_ + "/trainer.0.sleep.pid", absl::Seconds(30))) {
      // trainer.0.parent holds "<rank pid> <mpirun pid>".
      std::vector<std::string> pids =
          absl::StrSplit(ReadFileOrEmpty(out_ + "/trainer.0.parent"), ' ');
      int mpirun = 0;
      if (pids.size() == 2 && absl::SimpleAtoi(absl::StripAsciiWhitespace(pids[1]), &mpirun)) {
        kill(mpirun, SIGKILL);
      }
    }
  });
  JobResult result = Run();
  killer.join();
  EXPECT_EQ(result.exit_code, kExitPeerLost) << result.status;
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("killed by signal 9"));
  // TearDown checks that the ranks and their sleeping children are gone too.
}

TEST(PlanJobTest, RejectsBadValuesNamingTheFlag) {
  JobConfig config;
  config.job_id = "a.b";
  EXPECT_THAT(std::string(PlanJob(config).status().message()), HasSubstr("--job_id"));
  config.job_id = "ok";
  config.ready_timeout = absl::ZeroDuration();
  EXPECT_THAT(std::string(PlanJob(config).status().message()), HasSubstr("--ready_timeout"));
  config.ready_timeout = absl::Seconds(1);
  config.data_service.program = "/nonexistent/data_service";
  EXPECT_THAT(std::string(PlanJob(config).status().message()), HasSubstr("--data_service"));
  config.data_service.program = "/bin/true";
  config.trainers.mpirun = "/bin/true";
  config.trainers.trainer = "/nonexistent/trainer";
  EXPECT_THAT(std::string(PlanJob(config).status().message()), HasSubstr("--trainer"));
  config.trainers.trainer = "/bin/true";
  config.data_service.train_dir = "/nonexistent/train";
  EXPECT_THAT(std::string(PlanJob(config).status().message()),
              HasSubstr("--train_dir=/nonexistent/train: not a directory"));
  // A packed dataset is its index file: a folder is refused, the file is taken.
  config.data_service.dataset = "packed";
  config.data_service.train_dir = ::testing::TempDir();
  EXPECT_THAT(std::string(PlanJob(config).status().message()),
              HasSubstr(absl::StrCat("--train_dir=", ::testing::TempDir(), ": not a file")));
  const std::string index = absl::StrCat(::testing::TempDir(), "/train.stkpack");
  { std::ofstream(index) << "index"; }
  config.data_service.train_dir = index;
  EXPECT_THAT(std::string(PlanJob(config).status().message()),
              ::testing::Not(HasSubstr("--train_dir")));
}

TEST(PlanJobTest, PlansBothCommandsWithNvlsOff) {
  JobConfig config;
  config.job_id = "plan1";
  config.data_service.program = "/bin/true";
  config.trainers.mpirun = "true";  // found on the search path
  config.trainers.trainer = "/bin/true";
  config.trainers.ranks_per_node = 4;
  config.env = {"NCCL_NVLS_ENABLE=1", "STOKER_X=1"};
  config.search_path = "/nonexistent:/bin:/usr/bin";
  absl::StatusOr<JobPlan> plan = PlanJob(config);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->socket_path, "/tmp/stoker.plan1/data.sock");
  EXPECT_TRUE(absl::EndsWith(plan->trainers.program, "/true"));
  EXPECT_EQ(plan->trainers.argv[0], "true");
  EXPECT_THAT(plan->trainers.env, ElementsAre("STOKER_X=1", "NCCL_NVLS_ENABLE=0"));
  EXPECT_EQ(plan->data_service->env.back(), "NCCL_NVLS_ENABLE=0");
  EXPECT_THAT(plan->trainers.argv,
              ::testing::Contains("--data_socket=/tmp/stoker.plan1/data.sock"));
  const std::string script = FormatPlan(*plan);
  EXPECT_THAT(script, HasSubstr("NCCL_NVLS_ENABLE=0 true -np 4 -x NCCL_NVLS_ENABLE /bin/true "
                                "--data_socket=/tmp/stoker.plan1/data.sock --seed=0\n"));
  EXPECT_THAT(script, HasSubstr("/bin/true --socket=/tmp/stoker.plan1/data.sock --job_id=plan1"));
}

// The cluster modes under a fake srun: no data service here (each node's local rank 0 runs
// its own), the trainers get the job id and the dataset options instead of a socket.
class ClusterJobTest : public JobTest {
 protected:
  void SetUp() override {
    JobTest::SetUp();
    config_.trainers.mode = LaunchMode::kSlurm;
    config_.trainers.srun = Runfile("launcher/testing/fake_srun.sh");
    config_.trainers.slurm_nodes = 1;
    config_.trainers.ranks_per_node = 2;
    config_.data_service.program = "";
  }
};

TEST_F(ClusterJobTest, SrunAloneStartsTheRanksWithJobIdAndDatasetOptions) {
  config_.data_service.synthetic_samples = 64;
  JobResult result = Run();
  EXPECT_OK(result.status);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_FALSE(PathExists(out_ + "/data_service.pid"));
  EXPECT_THAT(Lines(out_ + "/srun.args"),
              ElementsAre("--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
                          "--export=ALL", Runfile("launcher/testing/fake_trainer.sh"),
                          "--job_id=" + config_.job_id, "--seed=7",
                          "--data_service_args=--dataset=synthetic --synthetic_samples=64",
                          "--epochs=1", "--name=a b"));
  EXPECT_EQ(ReadFileOrEmpty(out_ + "/trainer.1.env"), "NCCL_NVLS_ENABLE=0\n");
}

TEST_F(ClusterJobTest, NodeSocketsLeftOnThisMachineAreRemovedWithTheJobDirectory) {
  // As if this machine were node 0 and its data service had died without cleaning up.
  ASSERT_OK(MakeNodeJobDirectory("/tmp", config_.job_id));
  const std::string leftover = NodeSocketPath("/tmp", config_.job_id, 0);
  { std::ofstream(leftover) << "x"; }
  JobResult result = Run();
  EXPECT_EQ(result.exit_code, 0) << result.status;
  EXPECT_FALSE(PathExists(leftover));
  EXPECT_FALSE(PathExists(JobDirectoryPath("/tmp", config_.job_id)));
}

TEST_F(ClusterJobTest, FailingRankFailsTheJobWithItsCode) {
  SetEnv("STOKER_FAKE_TRAINER_EXIT", "4");
  SetEnv("STOKER_FAKE_TRAINER_FAILING_RANK", "1");
  JobResult result = Run();
  EXPECT_EQ(result.exit_code, 4);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("srun (pid"));
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("exited with code 4"));
}

TEST_F(ClusterJobTest, SigtermIsForwardedToSrunAndTheJobExits143) {
  KeepTheRanksTraining();
  std::thread sender = SigtermOnceRanksSleep();
  JobResult result = Run();
  sender.join();
  EXPECT_EQ(result.exit_code, 143);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("SIGTERM"));
  EXPECT_LT(elapsed_, absl::Seconds(10));
}

TEST(ClusterPlanTest, HostModesPlanMpirunWithHostsAndNoDataService) {
  JobConfig config;
  config.job_id = "plan2";
  config.search_path = "/usr/bin:/bin";
  config.trainers.mode = LaunchMode::kHostList;
  config.trainers.mpirun = "true";
  config.trainers.trainer = "/remote/only/trainer";  // not checked here: it is on the hosts
  config.trainers.ranks_per_node = 0;
  config.trainers.hosts = {{"gpu1", 2}, {"gpu2", 2}};
  config.data_service.dataset = "imagefolder";
  config.data_service.train_dir = "/remote/only/train";
  absl::StatusOr<JobPlan> plan = PlanJob(config);
  ASSERT_OK(plan);
  EXPECT_FALSE(plan->data_service.has_value());
  EXPECT_EQ(plan->trainers.name, "mpirun");
  const std::string script = FormatPlan(*plan);
  EXPECT_THAT(script, HasSubstr("(hosts mode): every node's local rank 0 starts that node's "
                                "data service"));
  EXPECT_THAT(script, HasSubstr("NCCL_NVLS_ENABLE=0 true -np 4 -H gpu1:2,gpu2:2 -x "
                                "NCCL_NVLS_ENABLE /remote/only/trainer --job_id=plan2 --seed=0 "
                                "'--data_service_args=--dataset=imagefolder "
                                "--train_dir=/remote/only/train'\n"));
}

}  // namespace
}  // namespace stoker::launcher
