// Tests of TempDir: fresh unique directories in the right parent, removed with their
// contents when the owner goes, ownership that moves.
#include "common/testing/temp_dir.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

bool IsDirectory(const std::string& path) { return std::filesystem::is_directory(path); }

TEST(TempDirTest, CreatesAFreshDirectoryUnderTestTmpdir) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create("ckpt"));
  EXPECT_TRUE(IsDirectory(dir.path()));
  EXPECT_THAT(dir.path(), StartsWith(std::string(std::getenv("TEST_TMPDIR")) + "/ckpt."));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  struct stat info {};
  ASSERT_EQ(::stat(dir.path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700);
}

TEST(TempDirTest, TwoDirectoriesOfOnePrefixDiffer) {
  ASSERT_OK_AND_ASSIGN(const TempDir first, TempDir::Create("same"));
  ASSERT_OK_AND_ASSIGN(const TempDir second, TempDir::Create("same"));
  EXPECT_NE(first.path(), second.path());
}

TEST(TempDirTest, ShortDirectoryLivesInSlashTmp) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::CreateShort("sock"));
  EXPECT_THAT(dir.path(), StartsWith("/tmp/sock."));
  EXPECT_TRUE(IsDirectory(dir.path()));
}

TEST(TempDirTest, JoinNamesAFileInside) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create());
  EXPECT_EQ(dir.Join("a/b.txt"), dir.path() + "/a/b.txt");
}

TEST(TempDirTest, DestructorRemovesTheTreeWithItsFiles) {
  std::string path;
  {
    ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create("tree"));
    path = dir.path();
    std::filesystem::create_directories(dir.Join("sub/deeper"));
    std::ofstream(dir.Join("sub/deeper/file")) << "bytes";
    std::ofstream(dir.Join("top")) << "bytes";
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, MoveTransfersOwnership) {
  ASSERT_OK_AND_ASSIGN(TempDir first, TempDir::Create("moved"));
  const std::string path = first.path();
  TempDir second = std::move(first);
  EXPECT_TRUE(first.path().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(second.path(), path);
  EXPECT_TRUE(IsDirectory(path));
  {
    TempDir third;
    third = std::move(second);
    EXPECT_TRUE(IsDirectory(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, MoveAssignmentRemovesTheDirectoryItReplaces) {
  ASSERT_OK_AND_ASSIGN(TempDir kept, TempDir::Create("kept"));
  ASSERT_OK_AND_ASSIGN(TempDir replaced, TempDir::Create("replaced"));
  const std::string replaced_path = replaced.path();
  replaced = std::move(kept);
  EXPECT_FALSE(std::filesystem::exists(replaced_path));
  EXPECT_TRUE(IsDirectory(replaced.path()));
}

TEST(TempDirTest, DefaultOwnerOwnsNothing) {
  const TempDir nothing;
  EXPECT_TRUE(nothing.path().empty());
}

TEST(TempDirTest, PrefixWithSlashIsRefused) {
  EXPECT_THAT(TempDir::Create("a/b"), StatusIs(absl::StatusCode::kInvalidArgument, "'a/b'"));
}

TEST(TempDirTest, MissingParentIsAnError) {
  const char* saved = std::getenv("TEST_TMPDIR");
  const std::string restore = saved != nullptr ? saved : "";
  ASSERT_EQ(::setenv("TEST_TMPDIR", "/nonexistent-stoker-parent", 1), 0);
  const absl::StatusOr<TempDir> dir = TempDir::Create("x");
  ::setenv("TEST_TMPDIR", restore.c_str(), 1);
  EXPECT_THAT(dir, StatusIs(absl::StatusCode::kNotFound, HasSubstr("mkdtemp")));
}

TEST(ListEntriesTest, NamesTheEntriesWithThePrefix) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create("entries"));
  std::ofstream(dir.Join("ring.0")) << "x";
  std::ofstream(dir.Join("ring.1")) << "x";
  std::filesystem::create_directory(dir.Join("sub"));
  EXPECT_THAT(ListEntries(dir.path()), ::testing::UnorderedElementsAre("ring.0", "ring.1", "sub"));
  EXPECT_THAT(ListEntries(dir.path(), "ring."),
              ::testing::UnorderedElementsAre("ring.0", "ring.1"));
  EXPECT_THAT(ListEntries(dir.path(), "none"), ::testing::IsEmpty());
}

TEST(ListEntriesTest, AMissingDirectoryHasNoEntries) {
  EXPECT_THAT(ListEntries("/nonexistent-stoker-parent"), ::testing::IsEmpty());
}

}  // namespace
}  // namespace stoker::testing
