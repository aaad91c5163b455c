// Atomic replacement of files, whole-file reads and directory creation; a full disk (a
// real ENOSPC from a small tmpfs) leaves the old file and no temporary.
#include "common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/test_tmpfs.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

using ::stoker::testing::ListEntries;
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;

TEST(AtomicFileTest, WritesThenReplacesAndLeavesNoTemporary) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_write"));
  const std::string dir = dir_temp.path();
  const std::string path = dir + "/weights.pt";
  ASSERT_OK(WriteFileAtomically(path, "first"));
  ASSERT_OK(WriteFileAtomically(path, std::string(100000, 'x')));
  auto read = ReadWholeFile(path);
  ASSERT_OK(read);
  EXPECT_EQ(*read, std::string(100000, 'x'));
  EXPECT_EQ(ListEntries(dir), std::vector<std::string>{"weights.pt"});
}

TEST(AtomicFileTest, PartsAreWrittenInOrderAndTheDestinationAppearsOnlyAtTheEnd) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_parts"));
  const std::string dir = dir_temp.path();
  const std::string path = dir + "/ckpt";
  const std::string big(70000, 'b');
  const std::vector<absl::string_view> parts = {"head", "", big, "tail"};
  std::vector<size_t> written;
  std::vector<std::vector<std::string>> seen;
  ASSERT_OK(WriteFileAtomically(path, parts, 0600, [&](size_t bytes) {
    written.push_back(bytes);
    seen.push_back(ListEntries(dir));
  }));
  EXPECT_EQ(written, (std::vector<size_t>{4, 4, 4 + big.size(), 8 + big.size()}));
  for (const std::vector<std::string>& names : seen) {
    ASSERT_EQ(names.size(), 1u);  // only the temporary, never a partial destination
    EXPECT_TRUE(absl::StartsWith(names[0], ".ckpt.tmp-")) << names[0];
  }
  auto read = ReadWholeFile(path);
  ASSERT_OK(read);
  EXPECT_EQ(*read, "head" + big + "tail");
  EXPECT_EQ(ListEntries(dir), std::vector<std::string>{"ckpt"});
}

TEST(AtomicFileTest, AFillWritesAtOffsetsFromSeveralThreads) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_fill"));
  const std::string dir = dir_temp.path();
  const std::string path = dir + "/ckpt";
  std::string expected(1 << 20, '\0');
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<char>(i * 31 + (i >> 12));
  ASSERT_OK(WriteFileAtomicallyWith(path, 0600, [&](int fd) {
    // Four threads, each a quarter, the last quarter first.
    std::vector<std::thread> threads;
    std::vector<int> errors(4, 0);
    const size_t quarter = expected.size() / 4;
    for (int t = 3; t >= 0; --t) {
      threads.emplace_back([&, t] {
        errors[t] = PwriteAll(fd, absl::string_view(expected).substr(t * quarter, quarter),
                              static_cast<off_t>(t * quarter));
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int error : errors) {
      if (error != 0) return error;
    }
    EXPECT_EQ(ListEntries(dir).size(), 1u);  // the temporary alone
    return 0;
  }));
  EXPECT_EQ(*ReadWholeFile(path), expected);
  EXPECT_EQ(ListEntries(dir), std::vector<std::string>{"ckpt"});
}

TEST(AtomicFileTest, AFillThatFailsLeavesTheOldFileAndNoTemporary) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_fill_fail"));
  const std::string dir = dir_temp.path();
  const std::string path = dir + "/ckpt";
  ASSERT_OK(WriteFileAtomically(path, "old"));
  const absl::Status status = WriteFileAtomicallyWith(path, 0600, [](int fd) {
    EXPECT_EQ(PwriteAll(fd, "partial", 0), 0);
    return ENOSPC;
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted,
                               HasSubstr("nothing at " + path + " was replaced")));
  EXPECT_EQ(ListEntries(dir), std::vector<std::string>{"ckpt"});
  EXPECT_EQ(*ReadWholeFile(path), "old");
}

TEST(AtomicFileTest, AFailedWriteNamesThePathAndLeavesNothing) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_fail"));
  const std::string dir = dir_temp.path();
  const absl::Status status = WriteFileAtomically(dir + "/missing/sub/file", "data");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir + "/missing/sub")));
  EXPECT_TRUE(ListEntries(dir).empty());
}

TEST(AtomicFileTest, ReadingAMissingFileIsNotFound) {
  EXPECT_THAT(ReadWholeFile("/nonexistent/stoker/file"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(AtomicFileTest, MakeDirectoriesCreatesParentsAndAcceptsExisting) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("mkdirs"));
  const std::string dir = dir_temp.path() + "/a/b/c";
  ASSERT_OK(MakeDirectories(dir));
  ASSERT_OK(MakeDirectories(dir));
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_OK(WriteFileAtomically(dir + "/f", "x"));
  EXPECT_THAT(MakeDirectories(dir + "/f"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(AtomicFileTest, AFullDiskLeavesTheOldFileAndNoTemporaryAndSaysENOSPC) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_full"));
  const std::string dir = dir_temp.path();
  // 64 KiB: the first file fits, a 100 KB replacement does not.
  if (absl::Status mounted = MountPrivateTmpfs(dir, 64 << 10); !mounted.ok()) {
    GTEST_SKIP() << "needs a small tmpfs: " << mounted;
  }
  const std::string path = dir + "/ckpt";
  const std::string old_contents(20000, 'o');
  ASSERT_OK(WriteFileAtomically(path, old_contents));

  const absl::Status status = WriteFileAtomically(path, std::string(100000, 'n'));
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(HasSubstr("cannot write " + path),
                                        HasSubstr("No space left on device"), HasSubstr("ENOSPC"),
                                        HasSubstr("nothing at " + path + " was replaced"))));
  EXPECT_EQ(ListEntries(dir), std::vector<std::string>{"ckpt"});
  auto read = ReadWholeFile(path);
  ASSERT_OK(read);
  EXPECT_EQ(*read, old_contents);

  // The space of the removed temporary is free again.
  ASSERT_OK(WriteFileAtomically(path, std::string(30000, 's')));
  EXPECT_EQ(ReadWholeFile(path)->size(), 30000u);
}

TEST(AtomicFileTest, FilesGetExactlyTheirModeWhateverTheUmask) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_mode"));
  const std::string dir = dir_temp.path();
  const mode_t old_umask = umask(0);
  ASSERT_OK(WriteFileAtomically(dir + "/private.ckpt", "x"));
  umask(077);
  ASSERT_OK(WriteFileAtomically(dir + "/shared.ckpt", "x", 0640));
  umask(old_umask);
  struct stat st;
  ASSERT_EQ(stat((dir + "/private.ckpt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((dir + "/shared.ckpt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(AtomicFileTest, ASymlinkAtTheDestinationIsReplacedNotWrittenThrough) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_symlink"));
  const std::string dir = dir_temp.path();
  const std::string target = dir + "/someone_elses_file";
  ASSERT_OK(WriteFileAtomically(target, "theirs"));
  ASSERT_EQ(symlink(target.c_str(), (dir + "/weights.pt").c_str()), 0);
  ASSERT_OK(WriteFileAtomically(dir + "/weights.pt", "mine"));
  EXPECT_EQ(*ReadWholeFile(target), "theirs");
  struct stat st;
  ASSERT_EQ(lstat((dir + "/weights.pt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(*ReadWholeFile(dir + "/weights.pt"), "mine");
}

TEST(AtomicFileTest, DirectoriesArePrivateByDefault) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("atomic_dirs"));
  const std::string dir = dir_temp.path();
  const mode_t old_umask = umask(0);
  ASSERT_OK(MakeDirectories(dir + "/a/b"));
  ASSERT_OK(MakeDirectories(dir + "/c", DirectoryModeFor(0640)));
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
