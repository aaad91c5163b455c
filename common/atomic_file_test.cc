// Atomic replacement of files, whole-file reads and directory creation; a full disk (a
// real ENOSPC from a small tmpfs) leaves the old file and no temporary.
#include "common/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/test_dir.h"
#include "common/test_tmpfs.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

TEST(AtomicFileTest, WritesThenReplacesAndLeavesNoTemporary) {
  const std::string dir = TestDir("atomic_write");
  const std::string path = dir + "/weights.pt";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, std::string(100000, 'x')).ok());
  auto read = ReadWholeFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, std::string(100000, 'x'));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"weights.pt"});
}

TEST(AtomicFileTest, AFailedWriteNamesThePathAndLeavesNothing) {
  const std::string dir = TestDir("atomic_fail");
  const absl::Status status = WriteFileAtomically(dir + "/missing/sub/file", "data");
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), dir + "/missing/sub")) << status;
  EXPECT_TRUE(Entries(dir).empty());
}

TEST(AtomicFileTest, ReadingAMissingFileIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(ReadWholeFile("/nonexistent/stoker/file").status()));
}

TEST(AtomicFileTest, MakeDirectoriesCreatesParentsAndAcceptsExisting) {
  const std::string dir = TestDir("mkdirs") + "/a/b/c";
  ASSERT_TRUE(MakeDirectories(dir).ok());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_TRUE(WriteFileAtomically(dir + "/f", "x").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(MakeDirectories(dir + "/f")));
}

TEST(AtomicFileTest, AFullDiskLeavesTheOldFileAndNoTemporaryAndSaysENOSPC) {
  const std::string dir = TestDir("atomic_full");
  // 64 KiB: the first file fits, a 100 KB replacement does not.
  if (absl::Status mounted = MountPrivateTmpfs(dir, 64 << 10); !mounted.ok()) {
    GTEST_SKIP() << "needs a small tmpfs: " << mounted;
  }
  const std::string path = dir + "/ckpt";
  const std::string old_contents(20000, 'o');
  ASSERT_TRUE(WriteFileAtomically(path, old_contents).ok());

  const absl::Status status = WriteFileAtomically(path, std::string(100000, 'n'));
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "cannot write " + path)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "No space left on device")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "ENOSPC")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "nothing at " + path + " was replaced")) << status;
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"ckpt"});
  auto read = ReadWholeFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, old_contents);

  // The space of the removed temporary is free again.
  ASSERT_TRUE(WriteFileAtomically(path, std::string(30000, 's')).ok());
  EXPECT_EQ(ReadWholeFile(path)->size(), 30000u);
}

TEST(AtomicFileTest, FilesGetExactlyTheirModeWhateverTheUmask) {
  const std::string dir = TestDir("atomic_mode");
  const mode_t old_umask = umask(0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/private.ckpt", "x").ok());
  umask(077);
  ASSERT_TRUE(WriteFileAtomically(dir + "/shared.ckpt", "x", 0640).ok());
  umask(old_umask);
  struct stat st;
  ASSERT_EQ(stat((dir + "/private.ckpt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((dir + "/shared.ckpt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(AtomicFileTest, ASymlinkAtTheDestinationIsReplacedNotWrittenThrough) {
  const std::string dir = TestDir("atomic_symlink");
  const std::string target = dir + "/someone_elses_file";
  ASSERT_TRUE(WriteFileAtomically(target, "theirs").ok());
  ASSERT_EQ(symlink(target.c_str(), (dir + "/weights.pt").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/weights.pt", "mine").ok());
  EXPECT_EQ(*ReadWholeFile(target), "theirs");
  struct stat st;
  ASSERT_EQ(lstat((dir + "/weights.pt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(*ReadWholeFile(dir + "/weights.pt"), "mine");
}

TEST(AtomicFileTest, DirectoriesArePrivateByDefault) {
  const std::string dir = TestDir("atomic_dirs");
  const mode_t old_umask = umask(0);
  ASSERT_TRUE(MakeDirectories(dir + "/a/b").ok());
  ASSERT_TRUE(MakeDirectories(dir + "/c", DirectoryModeFor(0640)).ok());
  umask(old_umask);
  struct stat st;
  for (const char* sub : {"/a", "/a/b"}) {
    ASSERT_EQ(stat((dir + sub).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u) << sub;
  }
  ASSERT_EQ(stat((dir + "/c").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(DirectoryModeFor(0600), 0700u);
  EXPECT_EQ(DirectoryModeFor(0644), 0755u);
}

}  // namespace
}  // namespace stoker
