// The launcher's command line: flags into LauncherOptions, `--` and what follows, and bad
// values refused by name in the launcher's wording.
#include "launcher/flags.h"

#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LauncherFlagsTest, FlagsBecomeOptions) {
  absl::FlagSaver saver;
  auto parsed = ParseLauncherCommandLine(std::vector<std::string>{
      "--np=2", "--hosts=a:2,b:2", "--mpirun_args=--bind-to  core", "--seed=7", "--job_id=j1",
      "--data_threads=3", "--data_service_args=--bad_files=fail", "--ready_timeout=5s", "--dry_run",
      "--", "--epochs=2", "--model", "resnet18"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const LauncherOptions& o = parsed->options;
  EXPECT_EQ(o.placement.ranks_per_node, 2);
  EXPECT_TRUE(o.placement.ranks_per_node_given);
  EXPECT_EQ(o.placement.hosts, "a:2,b:2");
  EXPECT_THAT(o.placement.mpirun_args, ElementsAre("--bind-to", "core"));
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.job_id, "j1");
  EXPECT_EQ(o.data.threads, 3);
  EXPECT_THAT(o.data.extra_args, ElementsAre("--bad_files=fail"));
  EXPECT_EQ(o.ready_timeout, absl::Seconds(5));
  EXPECT_TRUE(o.dry_run);
  EXPECT_THAT(o.trainer_args, ElementsAre("--epochs=2", "--model", "resnet18"));
}

TEST(LauncherFlagsTest, NpNotGivenIsToldApart) {
  absl::FlagSaver saver;
  auto parsed = ParseLauncherCommandLine(std::vector<std::string>{});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.placement.ranks_per_node, 1);
  EXPECT_FALSE(parsed->options.placement.ranks_per_node_given);
  EXPECT_EQ(parsed->options.placement.mode, "auto");
}

TEST(LauncherFlagsTest, BadValuesAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--np=many", "--np=many is not a valid value"},
      {"--bogus=1", "unknown flag --bogus"},
      {"train.py", "unexpected argument 'train.py'"},
      {"--mode=cloud", "--mode='cloud'"},
      {"--job_id=a.b", "--job_id 'a.b'"},
      {"--ready_timeout=0s", "--ready_timeout must be > 0"},
      {"--data_service_args=--socket=/tmp/x", "--data_service_args must not set --socket"},
  };
  for (const auto& [arg, message] : cases) {
    absl::FlagSaver saver;
    auto parsed = ParseLauncherCommandLine(std::vector<std::string>{arg});
    ASSERT_FALSE(parsed.ok()) << arg;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message));
  }
}

TEST(LauncherFlagsTest, HelpListsTheFlagsWithTheirDefaults) {
  absl::FlagSaver saver;
  auto parsed = ParseLauncherCommandLine(std::vector<std::string>{"--help"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->help);
  const std::string help = LauncherHelp();
  EXPECT_THAT(help, HasSubstr("Usage: launcher [flags] -- [trainer flags]"));
  for (const char* flag : {"--np=1", "--mpirun=mpirun", "--ready_timeout=1m", "--dry_run=false",
                           "--data_service_args", "--stop_grace"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace stoker::launcher
