#include "launcher/placement.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::testing::HasSubstr;

MATCHER_P2(Host, name, slots, "") { return arg.host == name && arg.slots == slots; }

TEST(HostListTest, ParsesHostsWithAndWithoutSlots) {
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostList("gpu1:8,gpu2.cluster:4,gpu3");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              ::testing::ElementsAre(Host("gpu1", 8), Host("gpu2.cluster", 4), Host("gpu3", 0)));
}

TEST(HostListTest, RejectsBadEntriesNamingTheFlag) {
  for (const char* bad : {"", "gpu1:0", "gpu1:x", "gpu1,,gpu2", "gpu1:4,gpu1:4", "a b:2"}) {
    absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostList(bad);
    EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(hosts.status().message()), HasSubstr("--hosts")) << bad;
  }
}

TEST(HostfileTest, ParsesOpenMpiHostfiles) {
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostfile(
      "# the cluster\n"
      "gpu1 slots=8\n"
      "\n"
      "gpu2   slots=8 max_slots=8   # second\n"
      "gpu3\n",
      "hosts.txt");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ::testing::ElementsAre(Host("gpu1", 8), Host("gpu2", 8), Host("gpu3", 0)));
}

TEST(HostfileTest, RejectsBadLinesNamingFileAndLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c :
       {Case{"gpu1 slots=8\ngpu2 slots=none\n", "hosts.txt line 2"},
        Case{"gpu1 cpus=4\n", "unknown word 'cpus=4'"},
        Case{"gpu1\ngpu1\n", "gpu1 is listed twice"}, Case{"# nothing\n\n", "lists no host"}}) {
    absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostfile(c.text, "hosts.txt");
    EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(hosts.status().message()), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(std::string(hosts.status().message()), HasSubstr("--hostfile hosts.txt"));
  }
}

TEST(SlurmAllocationTest, OutsideAnAllocationThereIsNone) {
  absl::StatusOr<absl::optional<SlurmAllocation>> allocation =
      SlurmAllocationFromEnvironment({{"PATH", "/bin"}, {"SLURM_NNODES", "2"}});
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_FALSE(allocation->has_value());
}

TEST(SlurmAllocationTest, ReadsNodesTasksAndGpusOfAnSbatchJob) {
  const std::map<std::string, std::string> env = {
      {"SLURM_JOB_ID", "4242"},       {"SLURM_JOB_NUM_NODES", "4"},
      {"SLURM_NTASKS_PER_NODE", "8"}, {"SLURM_TASKS_PER_NODE", "8(x4)"},
      {"SLURM_GPUS_ON_NODE", "8"},    {"SLURM_GPUS_PER_NODE", "h200:8"},
      {"SLURM_CPUS_PER_TASK", "16"}};
  absl::StatusOr<absl::optional<SlurmAllocation>> allocation = SlurmAllocationFromEnvironment(env);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  ASSERT_TRUE(allocation->has_value());
  EXPECT_EQ((*allocation)->job_id, "4242");
  EXPECT_EQ((*allocation)->nodes, 4);
  EXPECT_EQ((*allocation)->tasks_per_node, 8);
  EXPECT_EQ((*allocation)->gpus_per_node, 8);
  EXPECT_EQ((*allocation)->cpus_per_task, 16);
}

TEST(SlurmAllocationTest, FallsBackToOtherVariables) {
  absl::StatusOr<absl::optional<SlurmAllocation>> allocation =
      SlurmAllocationFromEnvironment({{"SLURM_JOB_ID", "7"},
                                      {"SLURM_NNODES", "2"},
                                      {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                      {"SLURM_GPUS_PER_NODE", "a100:4"}});
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_EQ((*allocation)->nodes, 2);
  EXPECT_EQ((*allocation)->tasks_per_node, 4);
  EXPECT_EQ((*allocation)->gpus_per_node, 4);

  allocation = SlurmAllocationFromEnvironment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_JOB_GPUS", "0,1,2"}});
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_EQ((*allocation)->tasks_per_node, 0);
  EXPECT_EQ((*allocation)->gpus_per_node, 3);
}

TEST(SlurmAllocationTest, UnevenTasksPerNodeIsUnknown) {
  absl::StatusOr<absl::optional<SlurmAllocation>> allocation = SlurmAllocationFromEnvironment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "3"}, {"SLURM_TASKS_PER_NODE", "8(x2),4"}});
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_EQ((*allocation)->tasks_per_node, 0);
}

TEST(SlurmAllocationTest, MalformedVariablesAreNamed) {
  absl::StatusOr<absl::optional<SlurmAllocation>> allocation =
      SlurmAllocationFromEnvironment({{"SLURM_JOB_ID", "7"}});
  EXPECT_THAT(std::string(allocation.status().message()), HasSubstr("SLURM_NNODES"));
  allocation = SlurmAllocationFromEnvironment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "1"}, {"SLURM_NTASKS_PER_NODE", "many"}});
  EXPECT_THAT(std::string(allocation.status().message()), HasSubstr("SLURM_NTASKS_PER_NODE"));
  allocation = SlurmAllocationFromEnvironment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "1"}, {"SLURM_GPUS_ON_NODE", "gpu:"}});
  EXPECT_THAT(std::string(allocation.status().message()), HasSubstr("SLURM_GPUS_ON_NODE"));
  allocation = SlurmAllocationFromEnvironment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "1"}, {"SLURM_CPUS_PER_TASK", "-2"}});
  EXPECT_THAT(std::string(allocation.status().message()), HasSubstr("SLURM_CPUS_PER_TASK"));
}

TEST(LaunchModeTest, AutoFollowsHostsThenSlurmThenLocal) {
  EXPECT_EQ(*ChooseLaunchMode("auto", true, false, true), LaunchMode::kHostfile);
  EXPECT_EQ(*ChooseLaunchMode("auto", false, true, true), LaunchMode::kHostList);
  EXPECT_EQ(*ChooseLaunchMode("auto", false, false, true), LaunchMode::kSlurm);
  EXPECT_EQ(*ChooseLaunchMode("auto", false, false, false), LaunchMode::kLocal);
  EXPECT_EQ(*ChooseLaunchMode("local", false, false, true), LaunchMode::kLocal);
  EXPECT_EQ(*ChooseLaunchMode("hosts", false, true, false), LaunchMode::kHostList);
  EXPECT_EQ(*ChooseLaunchMode("slurm", false, false, true), LaunchMode::kSlurm);
}

TEST(LaunchModeTest, ContradictionsNameTheFlags) {
  struct Case {
    const char* mode;
    bool hostfile, hosts, slurm;
    const char* message;
  };
  for (const Case& c : {Case{"auto", true, true, false, "--hostfile and --hosts"},
                        Case{"local", false, true, false, "--mode=local"},
                        Case{"hosts", false, false, true, "--mode=hosts needs"},
                        Case{"slurm", false, false, false, "SLURM_JOB_ID is not set"},
                        Case{"slurm", true, false, true, "drop --hostfile"},
                        Case{"cloud", false, false, false, "--mode='cloud'"}}) {
    absl::StatusOr<LaunchMode> mode = ChooseLaunchMode(c.mode, c.hostfile, c.hosts, c.slurm);
    EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument) << c.mode;
    EXPECT_THAT(std::string(mode.status().message()), HasSubstr(c.message)) << c.mode;
  }
}

TEST(SlurmRanksPerNodeTest, NpThenTasksThenGpus) {
  SlurmAllocation allocation{"9", 2, 4, 8, 0};
  EXPECT_EQ(*SlurmRanksPerNode(2, allocation), 2);
  EXPECT_EQ(*SlurmRanksPerNode(0, allocation), 4);
  allocation.tasks_per_node = 0;
  EXPECT_EQ(*SlurmRanksPerNode(0, allocation), 8);
}

TEST(SlurmRanksPerNodeTest, UnknownOrMoreRanksThanGpusFails) {
  absl::StatusOr<int> ranks = SlurmRanksPerNode(0, SlurmAllocation{"9", 2, 0, 0, 0});
  EXPECT_THAT(std::string(ranks.status().message()), HasSubstr("pass --np"));
  ranks = SlurmRanksPerNode(16, SlurmAllocation{"9", 2, 0, 8, 0});
  EXPECT_THAT(std::string(ranks.status().message()),
              HasSubstr("16 ranks per node (--np) but Slurm job 9 has 8 GPU(s) per node"));
}

}  // namespace
}  // namespace stoker::launcher
