// LauncherOptions::Validate refuses, naming the flag, what is wrong whatever the machine.
#include "launcher/options.h"

#include <functional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::testing::HasSubstr;

TEST(LauncherOptionsTest, TheDefaultsAreValid) {
  EXPECT_TRUE(LauncherOptions().Validate().ok()) << LauncherOptions().Validate();
}

TEST(LauncherOptionsTest, EveryBadValueIsRefusedNamingItsFlag) {
  const std::pair<const char*, std::function<void(LauncherOptions&)>> cases[] = {
      {"--mode='cloud': use auto, local, hosts or slurm",
       [](LauncherOptions& o) { o.placement.mode = "cloud"; }},
      {"--hostfile and --hosts both name the hosts",
       [](LauncherOptions& o) {
         o.placement.hostfile = "/tmp/hosts";
         o.placement.hosts = "a:1";
       }},
      {"--job_id 'a.b'", [](LauncherOptions& o) { o.job_id = "a.b"; }},
      {"--ready_timeout must be > 0",
       [](LauncherOptions& o) { o.ready_timeout = absl::ZeroDuration(); }},
      {"--stop_grace must be >= 0", [](LauncherOptions& o) { o.stop_grace = -absl::Seconds(1); }},
      {"--shutdown_grace must be >= 0",
       [](LauncherOptions& o) { o.shutdown_grace = -absl::Seconds(1); }},
  };
  for (const auto& [message, spoil] : cases) {
    LauncherOptions options;
    spoil(options);
    const absl::Status status = options.Validate();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << message << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  }
}

TEST(LauncherOptionsTest, EveryModeIsAccepted) {
  for (const char* mode : {"auto", "local", "hosts", "slurm"}) {
    LauncherOptions options;
    options.placement.mode = mode;
    EXPECT_TRUE(options.Validate().ok()) << mode;
  }
}

}  // namespace
}  // namespace stoker::launcher
