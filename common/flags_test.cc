// The strict flag layer: the forms it accepts, configuration files, --help, and errors
// that name the flag, in both wordings.
#include "common/flags.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, cl_count, 1, "a count");
ABSL_FLAG(std::string, cl_name, "", "a name");
ABSL_FLAG(bool, cl_switch, false, "a switch");
ABSL_FLAG(absl::Duration, cl_timeout, absl::Seconds(60), "a timeout");

namespace stoker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kFile[] = "common/flags_test.cc";

// The launcher's shape: trainer flags after `--`, the launcher's wording.
FlagSpec LauncherLikeSpec() {
  FlagSpec spec = FlagSpecOf("launcher", kFile);
  spec.passed_on = true;
  spec.positional_hint = "trainer flags go after '--'";
  spec.wording = FlagWording::kSentence;
  return spec;
}

// The trainer's shape: no `--`, --flagfile too, the name-first wording, sections.
FlagSpec TrainerLikeSpec() {
  FlagSpec spec = FlagSpecOf("trainer", kFile);
  spec.flagfile_alias = true;
  spec.positional_hint = "the trainer takes only --name=value flags";
  spec.sections = {{"Counting", {"cl_count", "cl_switch", "not_defined_here"}}};
  return spec;
}

absl::StatusOr<ParsedFlags> Parse(std::vector<const char*> args) {
  return ParseFlags(args, LauncherLikeSpec());
}

absl::StatusOr<ParsedFlags> ParseTrainerLike(std::vector<std::string> args) {
  return ParseFlags(absl::MakeConstSpan(args), TrainerLikeSpec());
}

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << contents;
  return path;
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
  absl::StatusOr<ParsedFlags> parsed =
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
  absl::StatusOr<ParsedFlags> parsed =
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
  absl::StatusOr<ParsedFlags> parsed = Parse({"--cl_count=2"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(parsed->passed_on, IsEmpty());
}

TEST_F(CommandLineTest, HelpIsReported) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->help);
}

TEST_F(CommandLineTest, UnknownFlagsAreNamed) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--cl_bogus=1"});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("unknown flag --cl_bogus"));
  // Flags of other files (absl's own, here) do not count either.
  EXPECT_FALSE(Parse({"--flagfile=/dev/null"}).ok());
  EXPECT_FALSE(Parse({"--nocl_count"}).ok());  // not a bool
}

TEST_F(CommandLineTest, MalformedValuesAreNamed) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--cl_count=many"});
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
  absl::StatusOr<ParsedFlags> parsed = Parse({"train.py", "--", "x"});
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("'train.py'"));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("after '--'"));
}

TEST(FlagsHelpTest, ListsOnlyThisFilesFlagsWithDefaults) {
  const std::string help = FlagsHelp(LauncherLikeSpec());
  EXPECT_THAT(help, HasSubstr("--cl_count=1\n      a count\n"));
  EXPECT_THAT(help, HasSubstr("--cl_timeout=1m\n"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("flagfile")));
  EXPECT_THAT(help, HasSubstr("--config=FILE"));
}

TEST(FlagsHelpTest, ListsSectionsInOrderThenTheOtherFlags) {
  const std::string help = FlagsHelp(TrainerLikeSpec());
  EXPECT_THAT(help, HasSubstr("\nCounting:\n  --cl_count (default \"1\")\n      a count\n"
                              "  --cl_switch (default \"false\")\n"));
  EXPECT_THAT(help, Not(HasSubstr("not_defined_here")));
  EXPECT_THAT(help, HasSubstr("\nOther flags:\n  --cl_name (default \"\")\n"));
  EXPECT_THAT(help, HasSubstr("--flagfile=FILE"));
}

TEST_F(CommandLineTest, ConfigFileSetsFlagsAndLaterFlagsOverrideIt) {
  const std::string config = TempFile("flags_test.cfg",
                                      "# a run\n"
                                      "cl_name=from file\n"
                                      "  --cl_count=12\n"
                                      "\n"
                                      "cl_switch\n");
  absl::StatusOr<ParsedFlags> parsed =
      Parse({"--cl_count=3", "--cl_name=before", "--config", config.c_str(), "--cl_name=after"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_count), 12);      // the file overrides what came before it
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_name), "after");  // and what comes after overrides it
  EXPECT_TRUE(absl::GetFlag(FLAGS_cl_switch));
  EXPECT_THAT(parsed->given, ElementsAre("cl_count", "cl_name", "cl_switch"));
}

TEST_F(CommandLineTest, ABadLineInAConfigFileNamesTheFileLineAndFlag) {
  const std::string config = TempFile("flags_test_bad.cfg", "cl_name=x\n# ok\ncl_count=ten\n");
  absl::StatusOr<ParsedFlags> parsed = ParseTrainerLike({absl::StrCat("--config=", config)});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr(absl::StrCat(config, " line 3: --cl_count=ten: not a valid value")));
  // A line is one flag: `--` does not end the flags there.
  const std::string separator = TempFile("flags_test_separator.cfg", "--\n");
  EXPECT_THAT(std::string(Parse({absl::StrCat("--config=", separator).c_str()}).status().message()),
              HasSubstr(absl::StrCat(separator, " line 1: unexpected argument '--'")));
}

TEST_F(CommandLineTest, ConfigFileErrorsNameTheFile) {
  EXPECT_THAT(std::string(ParseTrainerLike({"--config=/nonexistent/x.cfg"}).status().message()),
              HasSubstr("--config=/nonexistent/x.cfg: cannot read the file: No such file"));
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string directory = dir != nullptr ? dir : "/tmp";
  EXPECT_THAT(std::string(ParseTrainerLike({"--config=" + directory}).status().message()),
              HasSubstr(": not a regular file (a directory)"));
  EXPECT_THAT(std::string(ParseTrainerLike({"--config="}).status().message()),
              HasSubstr("--config needs a file"));
  const std::string loop = absl::StrCat(directory, "/flags_test_loop.cfg");
  std::ofstream(loop) << "flagfile=" << loop << "\n";
  EXPECT_THAT(std::string(ParseTrainerLike({"--config=" + loop}).status().message()),
              HasSubstr("nest deeper"));
}

TEST_F(CommandLineTest, FlagfileIsAcceptedOnlyWhereTheSpecSaysSo) {
  const std::string config = TempFile("flags_test.flagfile", "--cl_count=5\n");
  ASSERT_TRUE(ParseTrainerLike({"--flagfile=" + config}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_count), 5);
  EXPECT_FALSE(Parse({("--flagfile=" + config).c_str()}).ok());
}

TEST_F(CommandLineTest, NameFirstWordingNamesTheFlagFirst) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--cl_bogus=1", "--cl_bogus: unknown flag (run `trainer --help` for the flags)"},
      {"--cl_count", "--cl_count: a value is required (--cl_count=VALUE)"},
      {"--cl_count=x", "--cl_count=x: not a valid value ("},
      {"--cl_switch=maybe", "--cl_switch=maybe: not a valid value"},
      {"stray", "unexpected argument \"stray\" (the trainer takes only --name=value flags)"},
      {"--", "unexpected argument \"--\""},
  };
  for (const auto& [arg, expected] : cases) {
    absl::StatusOr<ParsedFlags> parsed = ParseTrainerLike({arg});
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(expected)) << arg;
  }
}

TEST(LocalFlagTest, BindsVariablesBesideAbslFlags) {
  int np = 0;
  std::string mpirun = "mpirun";
  FlagSpec spec;
  spec.program = "launcher doctor";
  spec.local = {IntFlag("np", &np, "ranks"), StringFlag("mpirun", &mpirun, "program")};
  spec.wording = FlagWording::kSentence;
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags(std::vector<const char*>{"--np=4", "--mpirun", "/opt/mpirun"}, spec);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(np, 4);
  EXPECT_EQ(mpirun, "/opt/mpirun");
  EXPECT_THAT(parsed->given, ElementsAre("mpirun", "np"));
  EXPECT_THAT(std::string(ParseFlags(std::vector<const char*>{"--np=x"}, spec).status().message()),
              HasSubstr("--np=x is not a valid value: not an integer"));
  // Only the spec's flags: this file's Abseil flags are not in it.
  EXPECT_THAT(
      std::string(ParseFlags(std::vector<const char*>{"--cl_count=1"}, spec).status().message()),
      HasSubstr("unknown flag --cl_count"));
  const std::string help = FlagsHelp(spec);
  EXPECT_THAT(help, HasSubstr("  --mpirun=mpirun\n      program\n  --np=0\n      ranks\n"));
}

TEST(ParseFlagsOrExitTest, ExitsWithTheUsageCodeNamingTheFlag) {
  FlagSpec spec = TrainerLikeSpec();
  spec.program = "tool";
  const char* argv[] = {"tool", "--cl_bogus=1", nullptr};
  EXPECT_EXIT(ParseFlagsOrExit(2, const_cast<char**>(argv), spec, "usage"),
              ::testing::ExitedWithCode(kExitUsage), "tool: --cl_bogus: unknown flag");
  const char* help[] = {"tool", "--help", nullptr};
  EXPECT_EXIT(ParseFlagsOrExit(2, const_cast<char**>(help), spec, "usage"),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace stoker
