#include "launcher/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, cl_count, 1, "a count");
ABSL_FLAG(std::string, cl_name, "", "a name");
ABSL_FLAG(bool, cl_switch, false, "a switch");
ABSL_FLAG(absl::Duration, cl_timeout, absl::Seconds(60), "a timeout");

namespace stoker::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kFile[] = "launcher/command_line_test.cc";

absl::StatusOr<ParsedCommandLine> Parse(std::vector<const char*> args) {
  return ParseFlags(args, kFile);
}

class CommandLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_cl_count, 1);
    absl::SetFlag(&FLAGS_cl_name, "");
    absl::SetFlag(&FLAGS_cl_switch, false);
    absl::SetFlag(&FLAGS_cl_timeout, absl::Seconds(60));
  }
};

TEST_F(CommandLineTest, SetsFlagsInEveryFormAndKeepsWhatFollowsTheSeparator) {
  absl::StatusOr<ParsedCommandLine> parsed =
      Parse({"--cl_count=4", "-cl_name", "x y", "--cl_switch", "--cl_timeout=2s", "--",
             "--epochs=3", "resnet", "--"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_count), 4);
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_name), "x y");
  EXPECT_TRUE(absl::GetFlag(FLAGS_cl_switch));
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_timeout), absl::Seconds(2));
  EXPECT_THAT(parsed->passed_on, ElementsAre("--epochs=3", "resnet", "--"));
  EXPECT_FALSE(parsed->help);
}

TEST_F(CommandLineTest, RecordsWhichFlagsWereGiven) {
  absl::StatusOr<ParsedCommandLine> parsed =
      Parse({"--cl_count=1", "--nocl_switch", "--", "--cl_name=after"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->given, ElementsAre("cl_count", "cl_switch"));
}

TEST_F(CommandLineTest, NoPrefixTurnsABoolOff) {
  absl::SetFlag(&FLAGS_cl_switch, true);
  ASSERT_TRUE(Parse({"--nocl_switch"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cl_switch));
}

TEST_F(CommandLineTest, NothingAfterTheSeparatorIsFine) {
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--cl_count=2"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(parsed->passed_on, IsEmpty());
}

TEST_F(CommandLineTest, HelpIsReported) {
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->help);
}

TEST_F(CommandLineTest, UnknownFlagsAreNamed) {
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--cl_bogus=1"});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("unknown flag --cl_bogus"));
  // Flags of other files (absl's own, here) do not count either.
  EXPECT_FALSE(Parse({"--flagfile=/dev/null"}).ok());
  EXPECT_FALSE(Parse({"--nocl_count"}).ok());  // not a bool
}

TEST_F(CommandLineTest, MalformedValuesAreNamed) {
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--cl_count=many"});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--cl_count=many"));
  EXPECT_THAT(std::string(Parse({"--cl_timeout=soon"}).status().message()),
              HasSubstr("--cl_timeout"));
}

TEST_F(CommandLineTest, MissingValueIsNamed) {
  EXPECT_THAT(std::string(Parse({"--cl_count"}).status().message()),
              HasSubstr("--cl_count needs a value"));
  EXPECT_THAT(std::string(Parse({"--cl_count", "--"}).status().message()),
              HasSubstr("--cl_count needs a value"));
}

TEST_F(CommandLineTest, BareArgumentsBeforeTheSeparatorAreRejected) {
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"train.py", "--", "x"});
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("'train.py'"));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("after '--'"));
}

TEST(FlagsHelpTest, ListsOnlyThisFilesFlagsWithDefaults) {
  const std::string help = FlagsHelp(kFile);
  EXPECT_THAT(help, HasSubstr("--cl_count=1\n      a count\n"));
  EXPECT_THAT(help, HasSubstr("--cl_timeout=1m\n"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("flagfile")));
}

}  // namespace
}  // namespace stoker::launcher
