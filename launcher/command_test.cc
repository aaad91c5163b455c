// JobConfigFor: LauncherOptions plus what the environment says (PATH, a Slurm allocation,
// STOKER_* settings) make the job's configuration.
#include "launcher/command.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/launch_command.h"

namespace stoker::launcher {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

LauncherOptions WithPrograms() {
  LauncherOptions options;
  options.trainer = "/opt/stoker/trainer";
  options.data_service = "/opt/stoker/data_service";
  return options;
}

TEST(CommandTest, DoctorIsTheFirstArgument) {
  EXPECT_TRUE(IsDoctorCommand({"doctor", "--np=2"}));
  EXPECT_FALSE(IsDoctorCommand({"--np=2", "doctor"}));
  EXPECT_FALSE(IsDoctorCommand({}));
}

TEST(CommandTest, LocalJobTakesThePathAndStokerSettingsFromTheEnvironment) {
  LauncherOptions options = WithPrograms();
  options.job_id = "j1";
  options.seed = 9;
  options.data.dataset = "synthetic";
  options.trainer_args = {"--epochs=2"};
  auto config = JobConfigFor(options, {"PATH=/usr/bin:/bin", "STOKER_PROGRESS_IN_PLACE=1",
                                       "LD_LIBRARY_PATH=/opt/lib", "HOME=/root"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->job_id, "j1");
  EXPECT_EQ(config->search_path, "/usr/bin:/bin");
  EXPECT_EQ(config->trainers.mode, LaunchMode::kLocal);
  EXPECT_EQ(config->trainers.trainer, "/opt/stoker/trainer");
  EXPECT_EQ(config->data_service.program, "/opt/stoker/data_service");
  EXPECT_EQ(config->data_service.data_seed, 9u);
  EXPECT_EQ(config->trainers.seed, 9u);
  EXPECT_THAT(config->trainers.trainer_args, ElementsAre("--epochs=2"));
  EXPECT_THAT(config->trainers.exported_env, ElementsAre("STOKER_PROGRESS_IN_PLACE"));
}

TEST(CommandTest, AJobIdIsMadeWhenNoneIsGiven) {
  auto config = JobConfigFor(WithPrograms(), {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->job_id.empty());
}

TEST(CommandTest, HostListTakesEachHostsSlotsUnlessNpIsGiven) {
  LauncherOptions options = WithPrograms();
  options.placement.hosts = "a:2,b:2";
  auto config = JobConfigFor(options, {"LD_LIBRARY_PATH=/opt/lib"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->trainers.mode, LaunchMode::kHostList);
  EXPECT_EQ(config->trainers.ranks_per_node, 0);
  EXPECT_EQ(config->trainers.hosts.size(), 2u);
  EXPECT_THAT(config->trainers.exported_env, Contains("LD_LIBRARY_PATH"));

  options.placement.ranks_per_node = 1;
  options.placement.ranks_per_node_given = true;
  config = JobConfigFor(options, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->trainers.ranks_per_node, 1);
  EXPECT_THAT(config->trainers.exported_env, ::testing::Not(Contains("LD_LIBRARY_PATH")));
}

TEST(CommandTest, SlurmModeOutsideAnAllocationIsRefused) {
  LauncherOptions options = WithPrograms();
  options.placement.mode = "slurm";
  auto config = JobConfigFor(options, {});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("SLURM_JOB_ID is not set"));
}

TEST(CommandTest, AnUnreadableHostfileIsNamed) {
  LauncherOptions options = WithPrograms();
  options.placement.hostfile = "/nonexistent/hosts";
  auto config = JobConfigFor(options, {});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("--hostfile /nonexistent/hosts: cannot read it"));
}

}  // namespace
}  // namespace stoker::launcher
