#include "launcher/rank/program_paths.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::MakeTempDir;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, mode_t mode) {
  std::ofstream(path) << "#!/bin/sh\n";
  chmod(path.c_str(), mode);
}

TEST(ResolveProgramTest, FindsBareNamesOnThePathInOrder) {
  const std::string first = MakeTempDir("path1");
  const std::string second = MakeTempDir("path2");
  WriteFile(second + "/tool", 0755);
  WriteFile(first + "/tool", 0644);  // not executable: skipped
  absl::StatusOr<std::string> found = ResolveProgram("tool", first + ":" + second, "--mpirun");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, second + "/tool");
}

TEST(ResolveProgramTest, MissingProgramNamesTheFlag) {
  absl::StatusOr<std::string> found = ResolveProgram("no-such-mpirun", "/nonexistent", "--mpirun");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("--mpirun=no-such-mpirun"));
}

TEST(ResolveProgramTest, EmptyPathFindsNothingRatherThanTheCurrentDirectory) {
  EXPECT_EQ(ResolveProgram("sh", "", "--mpirun").status().code(), absl::StatusCode::kNotFound);
}

TEST(ResolveProgramTest, PathsMustBeExecutableFiles) {
  const std::string dir = MakeTempDir("paths");
  WriteFile(dir + "/plain", 0644);
  EXPECT_FALSE(ResolveProgram(dir + "/plain", "", "--trainer").ok());
  EXPECT_FALSE(ResolveProgram(dir, "", "--trainer").ok());  // a directory
  EXPECT_TRUE(ResolveProgram("/bin/sh", "", "--trainer").ok());
}

TEST(SelfDirectoryTest, IsWhereThisTestBinaryLives) {
  absl::StatusOr<std::string> dir = SelfDirectory();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(IsExecutableFile(*dir + "/program_paths_test"));
}

TEST(FindSiblingProgramTest, PrefersTheSameDirectoryThenThePackageLayout) {
  const std::string root = MakeTempDir("layout");
  mkdir((root + "/launcher").c_str(), 0755);
  mkdir((root + "/trainer").c_str(), 0755);
  WriteFile(root + "/trainer/trainer", 0755);
  absl::StatusOr<std::string> found = FindSiblingProgram(root + "/launcher", "trainer", "--trainer");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, root + "/launcher/../trainer/trainer");

  WriteFile(root + "/launcher/trainer", 0755);
  found = FindSiblingProgram(root + "/launcher", "trainer", "--trainer");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, root + "/launcher/trainer");
}

TEST(FindSiblingProgramTest, MissingProgramSaysWhereItLookedAndWhichFlagToPass) {
  const std::string dir = MakeTempDir("empty");
  absl::StatusOr<std::string> found = FindSiblingProgram(dir, "data_service", "--data_service");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(found.status().message()), HasSubstr(dir + "/data_service"));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("--data_service=PATH"));
}

}  // namespace
}  // namespace stoker::launcher
