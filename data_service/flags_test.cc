// data_service's command line: defaults, the mapping into DataServiceOptions, and bad
// values refused by name before anything starts.
#include "data_service/flags.h"

#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/memory_limit.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

absl::StatusOr<DataServiceCommandLine> Parse(std::vector<const char*> args) {
  return ParseDataServiceCommandLine(args);
}

TEST(DataServiceFlagsTest, FlagsBecomeOptions) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--socket=/tmp/s.sock", "--job_id=j", "--node_id=3", "--threads=4",
                       "--jpeg_decode=exact", "--gpu_decode_share=0.25", "--follow_links=no",
                       "--scan_timeout_s=7", "--bad_files=fail", "--max_memory=none",
                       "--owner_record=/tmp/o", "--remove_socket_dir", "--require_sandbox"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const DataServiceOptions& o = parsed->options;
  EXPECT_EQ(o.service.socket_path, "/tmp/s.sock");
  EXPECT_EQ(o.service.job_id, "j");
  EXPECT_EQ(o.service.node_id, 3);
  EXPECT_EQ(o.service.threads, 4);
  EXPECT_TRUE(o.service.exact_jpeg);
  EXPECT_EQ(o.service.gpu_decode_share, 0.25);
  EXPECT_EQ(o.service.bad_samples.policy, BadFilePolicy::kFail);
  EXPECT_EQ(o.service.max_memory.kind, MaxMemory::Kind::kNone);
  EXPECT_FALSE(o.dataset.image_folder.follow_links_outside_root);
  EXPECT_EQ(o.dataset.image_folder.scan_timeout, absl::Seconds(7));
  EXPECT_EQ(o.owner_record, "/tmp/o");
  EXPECT_TRUE(o.remove_socket_dir);
  EXPECT_TRUE(o.sandbox);
  EXPECT_TRUE(o.require_sandbox);
}

TEST(DataServiceFlagsTest, NosandboxTurnsTheSandboxOff) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--socket=/tmp/s.sock", "--job_id=j", "--nosandbox"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->options.sandbox);
}

TEST(DataServiceFlagsTest, TheBinaryDefaultsAreKept) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--socket=/tmp/s.sock", "--job_id=j"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const DataServiceOptions& o = parsed->options;
  EXPECT_EQ(o.dataset.kind, "synthetic");
  EXPECT_EQ(o.service.prefetch, 2);
  EXPECT_FALSE(o.service.gpu_decode_share.has_value());
  EXPECT_EQ(o.service.max_memory.kind, MaxMemory::Kind::kAuto);
  EXPECT_TRUE(o.dataset.image_folder.follow_links_outside_root);
  EXPECT_EQ(o.service.shutdown_timeout, absl::Seconds(5));
  EXPECT_TRUE(o.sandbox);
  EXPECT_FALSE(o.require_sandbox);
}

TEST(DataServiceFlagsTest, BadValuesAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::vector<const char*>, std::string>> cases = {
      {{"--job_id=j"}, "--socket: required"},
      {{"--socket=/s"}, "--job_id: required"},
      {{"--socket=/s", "--job_id=j", "--bogus=1"}, "--bogus"},
      {{"--socket=/s", "--job_id=j", "--threads=many"}, "--threads"},
      {{"--socket=/s", "--job_id=j", "--prefetch=0"}, "--prefetch: must be at least 1"},
      {{"--socket=/s", "--job_id=j", "--bad_files=maybe"}, "--bad_files"},
      {{"--socket=/s", "--job_id=j", "--gpu_decode_share=most"},
       "--gpu_decode_share=most: must be auto or a number in [0, 1]"},
      {{"--socket=/s", "--job_id=j", "--jpeg_decode=slow"}, "--jpeg_decode=slow"},
      {{"--socket=/s", "--job_id=j", "--follow_links=maybe"}, "--follow_links=maybe"},
      {{"--socket=/s", "--job_id=j", "--max_memory=lots"}, "--max_memory=lots"},
      {{"--socket=/s", "--job_id=j", "stray"}, "stray"},
  };
  for (const auto& [args, message] : cases) {
    absl::FlagSaver saver;
    auto parsed = Parse(args);
    ASSERT_FALSE(parsed.ok()) << message;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    EXPECT_NE(std::string(parsed.status().message()).find(message), std::string::npos)
        << parsed.status();
  }
}

TEST(DataServiceFlagsTest, HelpNamesEveryFlagAndParsesNothingElse) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->help);
  const std::string help = DataServiceFlagsHelp();
  for (const char* flag : {"--socket", "--gpu_decode_share", "--max_memory", "--sandbox",
                           "--require_sandbox", "--owner_record", "--remove_socket_dir"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace stoker::data_service
