#include "launcher/launch_command.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::stoker::testing::IsOkAndHolds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TrainerLaunch TwoRankLaunch() {
  TrainerLaunch launch;
  launch.ranks_per_node = 2;
  launch.trainer = "/opt/stoker/trainer";
  launch.data_socket = "/tmp/stoker.j1/data.sock";
  launch.seed = 42;
  return launch;
}

TEST(TrainerArgvTest, LocalModeRunsTrainerUnderMpirunWithSocketAndSeed) {
  TrainerLaunch launch = TwoRankLaunch();
  launch.exported_env = {"NCCL_NVLS_ENABLE", "STOKER_TRACE"};
  launch.trainer_args = {"--epochs=3", "--model", "resnet18"};
  EXPECT_THAT(
      BuildTrainerArgv(launch),
      IsOkAndHolds(ElementsAre("mpirun", "-np", "2", "-x", "NCCL_NVLS_ENABLE", "-x", "STOKER_TRACE",
                               "/opt/stoker/trainer", "--data_socket=/tmp/stoker.j1/data.sock",
                               "--seed=42", "--epochs=3", "--model", "resnet18")));
}

TEST(TrainerArgvTest, MpirunArgsGoVerbatimAfterRankCount) {
  TrainerLaunch launch = TwoRankLaunch();
  launch.mpirun = "/usr/bin/mpirun";
  launch.mpirun_args = {"--oversubscribe", "--mca", "btl", "self,vader"};
  EXPECT_THAT(BuildTrainerArgv(launch),
              IsOkAndHolds(ElementsAre("/usr/bin/mpirun", "-np", "2", "--oversubscribe", "--mca",
                                       "btl", "self,vader", "/opt/stoker/trainer",
                                       "--data_socket=/tmp/stoker.j1/data.sock", "--seed=42")));
}

TEST(TrainerArgvTest, ExportsEachVariableOnce) {
  TrainerLaunch launch = TwoRankLaunch();
  launch.exported_env = {"NCCL_NVLS_ENABLE", "STOKER_A", "NCCL_NVLS_ENABLE"};
  absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_EQ(std::count(argv->begin(), argv->end(), "NCCL_NVLS_ENABLE"), 1);
}

TEST(TrainerArgvTest, RejectsZeroRanksNamingNp) {
  TrainerLaunch launch = TwoRankLaunch();
  launch.ranks_per_node = 0;
  absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
  EXPECT_EQ(argv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--np must be >= 1"));
}

TEST(TrainerArgvTest, RejectsRankCountInMpirunArgs) {
  for (const char* arg : {"-np", "--np=4", "-n", "-c"}) {
    TrainerLaunch launch = TwoRankLaunch();
    launch.mpirun_args = {arg, "4"};
    absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
    EXPECT_EQ(argv.status().code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--mpirun_args")) << arg;
  }
}

TEST(TrainerArgvTest, RejectsTrainerArgsThatSetSeedOrSocket) {
  for (const char* arg : {"--seed=1", "-seed", "--data_socket=/x"}) {
    TrainerLaunch launch = TwoRankLaunch();
    launch.trainer_args = {"--epochs=1", arg};
    absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
    EXPECT_EQ(argv.status().code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(argv.status().message()), HasSubstr(arg));
  }
}

TEST(TrainerArgvTest, AcceptsTrainerFlagsThatOnlyStartLikeSeed) {
  TrainerLaunch launch = TwoRankLaunch();
  launch.trainer_args = {"--seeds_file=x", "--data_socket_timeout=3s"};
  EXPECT_TRUE(BuildTrainerArgv(launch).ok());
}

TEST(TrainerArgvTest, RejectsMalformedVariableName) {
  TrainerLaunch launch = TwoRankLaunch();
  launch.exported_env = {"BAD-NAME"};
  EXPECT_EQ(BuildTrainerArgv(launch).status().code(), absl::StatusCode::kInvalidArgument);
}

// A cluster-mode launch: job id, seed and dataset args instead of a socket.
TrainerLaunch ClusterLaunch(LaunchMode mode) {
  TrainerLaunch launch;
  launch.mode = mode;
  launch.trainer = "/opt/stoker/trainer";
  launch.job_id = "j1";
  launch.seed = 42;
  launch.data_service_args = {"--dataset=imagefolder", "--train_dir=/data/train"};
  launch.exported_env = {"NCCL_NVLS_ENABLE", "LD_LIBRARY_PATH"};
  launch.trainer_args = {"--epochs=3"};
  return launch;
}

TEST(TrainerArgvTest, HostfileModeRunsEachHostsSlotsAndHandsTheDatasetToTheNodes) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kHostfile);
  launch.ranks_per_node = 0;
  launch.hostfile = "/etc/stoker/hosts";
  launch.hosts = {{"gpu1", 8}, {"gpu2", 8}};
  launch.mpirun_args = {"--mca", "btl_tcp_if_include", "ib0"};
  EXPECT_THAT(
      BuildTrainerArgv(launch),
      IsOkAndHolds(ElementsAre("mpirun", "-np", "16", "--hostfile", "/etc/stoker/hosts", "--mca",
                               "btl_tcp_if_include", "ib0", "-x", "NCCL_NVLS_ENABLE", "-x",
                               "LD_LIBRARY_PATH", "/opt/stoker/trainer", "--job_id=j1", "--seed=42",
                               "--data_service_args=--dataset=imagefolder --train_dir=/data/train",
                               "--epochs=3")));
}

TEST(TrainerArgvTest, HostfileModeWithNpPlacesThatManyRanksPerNode) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kHostfile);
  launch.ranks_per_node = 4;
  launch.hostfile = "hosts";
  launch.hosts = {{"gpu1", 8}, {"gpu2", 0}, {"gpu3", 4}};
  launch.exported_env = {};
  launch.data_service = "/opt/stoker/data_service";
  EXPECT_THAT(
      BuildTrainerArgv(launch),
      IsOkAndHolds(ElementsAre("mpirun", "-np", "12", "--hostfile", "hosts", "--map-by",
                               "ppr:4:node", "/opt/stoker/trainer", "--job_id=j1", "--seed=42",
                               "--data_service=/opt/stoker/data_service",
                               "--data_service_args=--dataset=imagefolder --train_dir=/data/train",
                               "--epochs=3")));
}

TEST(TrainerArgvTest, HostListModePassesHostsAsDashH) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kHostList);
  launch.ranks_per_node = 0;
  launch.hosts = {{"gpu1", 4}, {"gpu2", 4}};
  launch.exported_env = {"NCCL_NVLS_ENABLE"};
  EXPECT_THAT(
      BuildTrainerArgv(launch),
      IsOkAndHolds(ElementsAre(
          "mpirun", "-np", "8", "-H", "gpu1:4,gpu2:4", "-x", "NCCL_NVLS_ENABLE",
          "/opt/stoker/trainer", "--job_id=j1", "--seed=42",
          "--data_service_args=--dataset=imagefolder --train_dir=/data/train", "--epochs=3")));
}

TEST(TrainerArgvTest, HostListModeWithNpMapsByNode) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kHostList);
  launch.ranks_per_node = 2;
  launch.hosts = {{"a", 0}, {"b", 0}};
  absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(std::vector<std::string>(argv->begin(), argv->begin() + 7),
              ElementsAre("mpirun", "-np", "4", "-H", "a,b", "--map-by", "ppr:2:node"));
}

TEST(TrainerArgvTest, HostModesNeedSlotsOrNpAndEnoughSlots) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kHostList);
  launch.ranks_per_node = 0;
  launch.hosts = {{"gpu1", 4}, {"gpu2", 0}};
  EXPECT_THAT(std::string(BuildTrainerArgv(launch).status().message()),
              HasSubstr("--hosts: host gpu2 states no slot count; write HOST:N or pass --np"));
  launch.mode = LaunchMode::kHostfile;
  launch.hostfile = "hosts";
  EXPECT_THAT(std::string(BuildTrainerArgv(launch).status().message()),
              HasSubstr("write 'HOST slots=N'"));
  launch.ranks_per_node = 8;
  EXPECT_THAT(std::string(BuildTrainerArgv(launch).status().message()),
              HasSubstr("--np=8 ranks per node, but --hostfile gives gpu1 only 4 slot(s)"));
}

TEST(TrainerArgvTest, SlurmModeRunsSrunOverTheAllocation) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kSlurm);
  launch.ranks_per_node = 8;
  launch.slurm_nodes = 4;
  launch.slurm_gpus = true;
  launch.slurm_cpus_per_task = 12;
  launch.srun_args = {"--mpi=pmix"};
  absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
  ASSERT_TRUE(argv.ok()) << argv.status();
  // No -x: srun hands the whole environment to the ranks (--export=ALL).
  EXPECT_THAT(
      *argv,
      ElementsAre("srun", "--nodes=4", "--ntasks=32", "--ntasks-per-node=8", "--kill-on-bad-exit=1",
                  "--export=ALL", "--cpus-per-task=12", "--gpu-bind=none", "--mpi=pmix",
                  "/opt/stoker/trainer", "--job_id=j1", "--seed=42",
                  "--data_service_args=--dataset=imagefolder --train_dir=/data/train",
                  "--epochs=3"));
}

TEST(TrainerArgvTest, SlurmModeWithoutGpusLeavesGpuBindingAlone) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kSlurm);
  launch.ranks_per_node = 2;
  launch.slurm_nodes = 1;
  launch.srun = "/usr/bin/srun";
  absl::StatusOr<std::vector<std::string>> argv = BuildTrainerArgv(launch);
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(std::vector<std::string>(argv->begin(), argv->begin() + 7),
              ElementsAre("/usr/bin/srun", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2",
                          "--kill-on-bad-exit=1", "--export=ALL", "/opt/stoker/trainer"));
}

TEST(TrainerArgvTest, SrunArgsMustNotSetTheTaskCount) {
  for (const char* arg : {"-n", "--ntasks=4", "-N", "--nodes=2", "--ntasks-per-node=1"}) {
    TrainerLaunch launch = ClusterLaunch(LaunchMode::kSlurm);
    launch.ranks_per_node = 2;
    launch.slurm_nodes = 1;
    launch.srun_args = {arg, "4"};
    absl::Status status = BuildTrainerArgv(launch).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(status.message()), HasSubstr("--srun_args")) << arg;
  }
}

TEST(TrainerArgvTest, ClusterModesRejectTrainerArgsThatSetWhatTheLauncherSets) {
  for (const char* arg : {"--job_id=x", "--seed=3", "--data_service_args=--threads=2"}) {
    TrainerLaunch launch = ClusterLaunch(LaunchMode::kSlurm);
    launch.ranks_per_node = 2;
    launch.slurm_nodes = 1;
    launch.trainer_args = {arg};
    absl::Status status = BuildTrainerArgv(launch).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(status.message()), HasSubstr(arg));
  }
}

TEST(TrainerArgvTest, DataServiceArgsMustNotHoldWhitespace) {
  TrainerLaunch launch = ClusterLaunch(LaunchMode::kHostList);
  launch.hosts = {{"a", 1}};
  launch.ranks_per_node = 0;
  launch.data_service_args = {"--train_dir=/data/my images"};
  EXPECT_THAT(std::string(BuildTrainerArgv(launch).status().message()),
              HasSubstr("holds whitespace"));
}

DataServiceLaunch SyntheticLaunch() {
  DataServiceLaunch launch{/*program=*/"/opt/stoker/data_service",
                           /*socket=*/"/tmp/stoker.j1/data.sock", /*job_id=*/"j1"};
  launch.data_seed = 42;
  return launch;
}

TEST(DataServiceArgvTest, DatasetArgsLeaveOutSocketJobNodeAndSeed) {
  DataServiceLaunch launch = SyntheticLaunch();
  launch.dataset = "synthetic";
  launch.synthetic_samples = 256;
  launch.threads = 3;
  launch.node_id = 1;
  EXPECT_THAT(
      DataServiceDatasetArgs(launch),
      IsOkAndHolds(ElementsAre("--dataset=synthetic", "--synthetic_samples=256", "--threads=3")));
}

TEST(DataServiceArgvTest, PassesOnlyTheOptionsThatAreSet) {
  EXPECT_THAT(
      BuildDataServiceArgv(SyntheticLaunch()),
      IsOkAndHolds(ElementsAre("/opt/stoker/data_service", "--socket=/tmp/stoker.j1/data.sock",
                               "--job_id=j1", "--node_id=0", "--data_seed=42")));
}

TEST(DataServiceArgvTest, PassesEveryOptionWhenAllAreSet) {
  DataServiceLaunch launch = SyntheticLaunch();
  launch.dataset = "imagefolder";
  launch.train_dir = "/data/train";
  launch.val_dir = "/data/val";
  launch.synthetic_samples = 1000;
  launch.synthetic_classes = 10;
  launch.threads = 8;
  launch.prefetch = 4;
  EXPECT_THAT(BuildDataServiceArgv(launch),
              IsOkAndHolds(ElementsAre(
                  "/opt/stoker/data_service", "--socket=/tmp/stoker.j1/data.sock", "--job_id=j1",
                  "--node_id=0", "--data_seed=42", "--dataset=imagefolder",
                  "--train_dir=/data/train", "--val_dir=/data/val", "--synthetic_samples=1000",
                  "--synthetic_classes=10", "--threads=8", "--prefetch=4")));
}

TEST(DataServiceArgvTest, ExtraArgsComeLastSoTheyWin) {
  DataServiceLaunch launch = SyntheticLaunch();
  launch.dataset = "synthetic";
  launch.threads = 8;
  launch.extra_args = {"--bad_files=fail", "--threads=2", "--data_seed=7"};
  EXPECT_THAT(BuildDataServiceArgv(launch),
              IsOkAndHolds(
                  ElementsAre("/opt/stoker/data_service", "--socket=/tmp/stoker.j1/data.sock",
                              "--job_id=j1", "--node_id=0", "--data_seed=42", "--dataset=synthetic",
                              "--threads=8", "--bad_files=fail", "--threads=2", "--data_seed=7")));
  // The cluster modes hand the same words to the nodes, after the dataset options.
  EXPECT_THAT(DataServiceDatasetArgs(launch),
              IsOkAndHolds(ElementsAre("--dataset=synthetic", "--threads=8", "--bad_files=fail",
                                       "--threads=2", "--data_seed=7")));
}

TEST(DataServiceArgvTest, ExtraArgsMustNotSetWhatTheLauncherDecides) {
  for (const char* arg : {"--socket=/x", "--job_id=k", "--node_id=1", "fail"}) {
    DataServiceLaunch launch = SyntheticLaunch();
    launch.extra_args = {arg};
    absl::StatusOr<std::vector<std::string>> argv = BuildDataServiceArgv(launch);
    EXPECT_EQ(argv.status().code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--data_service_args")) << arg;
  }
}

TEST(DataServiceArgvTest, RejectsUnknownDatasetNamingTheFlag) {
  DataServiceLaunch launch = SyntheticLaunch();
  launch.dataset = "lmdb";
  absl::StatusOr<std::vector<std::string>> argv = BuildDataServiceArgv(launch);
  EXPECT_EQ(argv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--dataset"));
}

TEST(DataServiceArgvTest, ImageFolderNeedsTrainDir) {
  DataServiceLaunch launch = SyntheticLaunch();
  launch.dataset = "imagefolder";
  absl::StatusOr<std::vector<std::string>> argv = BuildDataServiceArgv(launch);
  EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--train_dir"));
}

TEST(DataServiceArgvTest, RejectsNegativeCountsNamingTheFlag) {
  DataServiceLaunch launch = SyntheticLaunch();
  launch.threads = -1;
  absl::StatusOr<std::vector<std::string>> argv = BuildDataServiceArgv(launch);
  EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--data_threads must be >= 0"));
}

TEST(ShellQuoteTest, LeavesPlainWordsAlone) {
  EXPECT_EQ(ShellQuote("--data_socket=/tmp/stoker.j1/data.sock"),
            "--data_socket=/tmp/stoker.j1/data.sock");
  EXPECT_EQ(ShellQuote("self,vader"), "self,vader");
}

TEST(ShellQuoteTest, QuotesSpacesEmptyWordsAndQuotes) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
}

TEST(FormatCommandTest, PrefixesAssignmentsAndQuotesValues) {
  EXPECT_EQ(FormatCommand({"NCCL_NVLS_ENABLE=0", "STOKER_NOTE=a b"},
                          {"mpirun", "-np", "2", "/x/trainer", "--name=a b"}),
            "NCCL_NVLS_ENABLE=0 STOKER_NOTE='a b' mpirun -np 2 /x/trainer '--name=a b'");
}

TEST(FormatCommandTest, QuotesFirstWordThatLooksLikeAnAssignment) {
  EXPECT_EQ(FormatCommand({}, {"/odd/A=B", "x=y"}), "'/odd/A=B' x=y");
}

TEST(EnvironmentTest, FindsNamesWithPrefix) {
  EXPECT_THAT(
      EnvironmentNamesWithPrefix(
          {"PATH=/bin", "STOKER_A=1", "STOKER_B=", "XSTOKER_C=2", "STOKER_BROKEN"}, "STOKER_"),
      ElementsAre("STOKER_A", "STOKER_B"));
}

TEST(EnvironmentTest, RecognisesVariableNames) {
  EXPECT_TRUE(IsEnvironmentName("NCCL_NVLS_ENABLE"));
  EXPECT_TRUE(IsEnvironmentName("_x1"));
  EXPECT_FALSE(IsEnvironmentName(""));
  EXPECT_FALSE(IsEnvironmentName("1X"));
  EXPECT_FALSE(IsEnvironmentName("A-B"));
}

}  // namespace
}  // namespace stoker::launcher
