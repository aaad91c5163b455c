#include "launcher/rank/program_paths.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, mode_t mode) {
  std::ofstream(path) << "#!/bin/sh\n";
  chmod(path.c_str(), mode);
}

TEST(ResolveProgramTest, FindsBareNamesOnThePathInOrder) {
  ASSERT_OK_AND_ASSIGN(const TempDir first_temp, TempDir::Create("path1"));
  const std::string first = first_temp.path();
  ASSERT_OK_AND_ASSIGN(const TempDir second_temp, TempDir::Create("path2"));
  const std::string second = second_temp.path();
  WriteFile(second + "/tool", 0755);
  WriteFile(first + "/tool", 0644);  // not executable: skipped
  absl::StatusOr<std::string> found = ResolveProgram("tool", first + ":" + second, "--mpirun");
  ASSERT_OK(found);
  EXPECT_EQ(*found, second + "/tool");
}

TEST(ResolveProgramTest, MissingProgramNamesTheFlag) {
  absl::StatusOr<std::string> found = ResolveProgram("no-such-mpirun", "/nonexistent", "--mpirun");
  EXPECT_THAT(found, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("--mpirun=no-such-mpirun"));
}

TEST(ResolveProgramTest, EmptyPathFindsNothingRatherThanTheCurrentDirectory) {
  EXPECT_THAT(ResolveProgram("sh", "", "--mpirun"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ResolveProgramTest, PathsMustBeExecutableFiles) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("paths"));
  const std::string dir = dir_temp.path();
  WriteFile(dir + "/plain", 0644);
  EXPECT_FALSE(ResolveProgram(dir + "/plain", "", "--trainer").ok());
  EXPECT_FALSE(ResolveProgram(dir, "", "--trainer").ok());  // a directory
  EXPECT_OK(ResolveProgram("/bin/sh", "", "--trainer"));
}

TEST(SelfDirectoryTest, IsWhereThisTestBinaryLives) {
  absl::StatusOr<std::string> dir = SelfDirectory();
  ASSERT_OK(dir);
  EXPECT_TRUE(IsExecutableFile(*dir + "/program_paths_test"));
}

TEST(FindSiblingProgramTest, PrefersTheSameDirectoryThenThePackageLayout) {
  ASSERT_OK_AND_ASSIGN(const TempDir root_temp, TempDir::Create("layout"));
  const std::string root = root_temp.path();
  mkdir((root + "/launcher").c_str(), 0755);
  mkdir((root + "/trainer").c_str(), 0755);
  WriteFile(root + "/trainer/trainer", 0755);
  absl::StatusOr<std::string> found =
      FindSiblingProgram(root + "/launcher", "trainer", "--trainer");
  ASSERT_OK(found);
  EXPECT_EQ(*found, root + "/launcher/../trainer/trainer");

  WriteFile(root + "/launcher/trainer", 0755);
  found = FindSiblingProgram(root + "/launcher", "trainer", "--trainer");
  ASSERT_OK(found);
  EXPECT_EQ(*found, root + "/launcher/trainer");
}

TEST(FindSiblingProgramTest, MissingProgramSaysWhereItLookedAndWhichFlagToPass) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("empty"));
  const std::string dir = dir_temp.path();
  absl::StatusOr<std::string> found = FindSiblingProgram(dir, "data_service", "--data_service");
  EXPECT_THAT(found, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr(dir + "/data_service"));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("--data_service=PATH"));
}

}  // namespace
}  // namespace stoker::launcher
