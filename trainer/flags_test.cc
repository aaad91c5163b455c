// The trainer's command line: flags, configuration files, and errors that name the flag.
#include "trainer/flags.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

absl::StatusOr<TrainerCommandLine> Parse(std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseTrainerCommandLine(argv);
}

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << contents;
  return path;
}

TEST(TrainerFlagsTest, ParsesFlagsIntoOptions) {
  absl::FlagSaver saver;
  auto parsed =
      Parse({"--data_socket=/s", "--epochs=7", "--lr_schedule=step", "--lr_step_epochs=2,5",
             "--nesterov", "--nochannels_last", "--optimizer=sgd", "--export=/tmp/m.pt",
             "--model=/models/net.pt2", "--init_weights=/tmp/w.safetensors"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.epochs, 7);
  EXPECT_EQ(parsed->options.schedule.kind, LrSchedule::kStep);
  EXPECT_EQ(parsed->options.schedule.step_epochs, (std::vector<int>{2, 5}));
  EXPECT_TRUE(parsed->options.optimizer.nesterov);
  EXPECT_FALSE(parsed->options.device.channels_last);
  EXPECT_EQ(parsed->options.report.export_path, "/tmp/m.pt");
  EXPECT_EQ(parsed->options.model.name, "/models/net.pt2");
  EXPECT_EQ(parsed->options.model.init_weights, "/tmp/w.safetensors");
}

TEST(TrainerFlagsTest, ParsesFp8PrecisionForAnExportedModel) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--data_socket=/s", "--model=/models/vit.pt2", "--precision=fp8"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.device.precision, Precision::kFp8);
}

TEST(TrainerFlagsTest, EachMalformedValueNamesItsFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--epochs=abc", "--epochs=abc"},
      {"--lr=fast", "--lr=fast"},
      {"--nesterov=maybe", "--nesterov=maybe"},
      {"--precision=fp4", "--precision=fp4"},
      {"--lr_schedule=linear", "--lr_schedule=linear"},
      {"--data_split=test", "--data_split=test"},
      {"--lr_step_epochs=3,x", "--lr_step_epochs"},
      {"--bucket_mb=0", "--bucket_mb=0"},
      {"--epochs", "--epochs: a value is required"},
      {"--no_such_flag=1", "--no_such_flag: unknown flag"},
      {"stray", "unexpected argument \"stray\""},
      {"--batch_size=-4", "--batch_size=-4"},
      {"--accumulate=0", "--accumulate=0"},
  };
  for (const auto& [arg, expected] : cases) {
    absl::FlagSaver saver;
    auto parsed = Parse({"--data_socket=/s", arg});
    ASSERT_FALSE(parsed.ok()) << arg;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << arg;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), expected))
        << arg << " -> " << parsed.status().message();
  }
}

TEST(TrainerFlagsTest, FlagsOfLinkedLibrariesAreNotTrainerFlags) {
  absl::FlagSaver saver;
  // gtest's own flags are registered in this binary, but they are not the trainer's.
  auto parsed = Parse({"--data_socket=/s", "--flagfile_does_not_exist=1"});
  EXPECT_FALSE(parsed.ok());
}

TEST(TrainerFlagsTest, ConfigFileSetsFlagsAndLaterFlagsOverrideIt) {
  absl::FlagSaver saver;
  const std::string config = TempFile("trainer_flags_test.cfg",
                                      "# a run\n"
                                      "data_socket=/s\n"
                                      "  --epochs=12\n"
                                      "\n"
                                      "lr=0.4\n"
                                      "no_decay_bn_bias\n");
  auto parsed = Parse({"--epochs=3", absl::StrCat("--config=", config), "--lr=0.2"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.epochs, 12);  // the file overrides what came before it
  EXPECT_DOUBLE_EQ(parsed->options.optimizer.learning_rate,
                   0.2);  // and what comes after overrides it
  EXPECT_TRUE(parsed->options.optimizer.no_decay_bn_bias);
  EXPECT_EQ(parsed->options.input.data_socket, "/s");
}

TEST(TrainerFlagsTest, FlagfileIsTheSameAsConfig) {
  absl::FlagSaver saver;
  const std::string config =
      TempFile("trainer_flags_test.flagfile", "--data_socket=/s\n--epochs=5\n");
  auto parsed = Parse({absl::StrCat("--flagfile=", config)});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.epochs, 5);
}

TEST(TrainerFlagsTest, ABadLineInAConfigFileNamesTheFileLineAndFlag) {
  absl::FlagSaver saver;
  const std::string config =
      TempFile("trainer_flags_test_bad.cfg", "data_socket=/s\n# ok\nepochs=ten\n");
  auto parsed = Parse({absl::StrCat("--config=", config)});
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(
      absl::StrContains(parsed.status().message(), absl::StrCat(config, " line 3: --epochs=ten")))
      << parsed.status().message();
}

TEST(TrainerFlagsTest, AMissingConfigFileIsAnError) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--config=/nonexistent/stoker.cfg"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "--config=/nonexistent/stoker.cfg"))
      << parsed.status().message();
}

TEST(TrainerFlagsTest, AConfigFileThatIncludesItselfIsRefused) {
  absl::FlagSaver saver;
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/trainer_flags_loop.cfg");
  std::ofstream(path) << "config=" << path << "\n";
  auto parsed = Parse({absl::StrCat("--config=", path)});
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "nest")) << parsed.status().message();
}

TEST(TrainerFlagsTest, HelpListsEveryTrainerFlagWithItsHelp) {
  const std::string help = TrainerFlagsHelp();
  int trainer_flags = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::EndsWith(flag->Filename(), "trainer/flags.cc")) continue;
    ++trainer_flags;
    EXPECT_TRUE(absl::StrContains(help, absl::StrCat("  --", name, " (default"))) << name;
    EXPECT_FALSE(flag->Help().empty()) << name;
  }
  EXPECT_GT(trainer_flags, 50);
  EXPECT_TRUE(absl::StrContains(help, "Exit codes"));
}

TEST(TrainerFlagsTest, HelpIsRecognised) {
  absl::FlagSaver saver;
  auto parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->help);
}

}  // namespace
}  // namespace stoker::trainer
