#include "launcher/rank/job_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::PathExists;
using ::stoker::testing::ListEntries;
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Job directories live in /tmp as in real jobs (TEST_TMPDIR is too long a parent for a
// socket path), under random ids: parallel runs share /tmp.
const char kParent[] = "/tmp";

std::string UniqueId(const std::string& tag) {
  static const std::string* const run = new std::string(GenerateJobId());
  return absl::StrCat(*run, "-", tag);
}

TEST(JobIdTest, AcceptsPlainIdsAndRejectsDotsSlashesAndLongIds) {
  EXPECT_OK(ValidateJobId("gpu07-4242-9f31c2aa"));
  EXPECT_OK(ValidateJobId("run_1"));
  EXPECT_FALSE(ValidateJobId("").ok());
  EXPECT_FALSE(ValidateJobId("a.b").ok());
  EXPECT_FALSE(ValidateJobId("../x").ok());
  EXPECT_FALSE(ValidateJobId(std::string(kMaxJobIdLength + 1, 'a')).ok());
  EXPECT_THAT(std::string(ValidateJobId("a b").message()), HasSubstr("--job_id"));
}

TEST(JobIdTest, GeneratedIdsAreValidAndDistinct) {
  const std::string a = GenerateJobId();
  const std::string b = GenerateJobId();
  EXPECT_OK(ValidateJobId(a)) << a;
  EXPECT_NE(a, b);
  EXPECT_THAT(a, HasSubstr(absl::StrCat("-", getpid(), "-")));
}

TEST(JobDirectoryTest, IsCreatedOwnerOnlyAndRemovedWithItsContents) {
  const std::string id = UniqueId("job1");
  absl::StatusOr<JobDirectory> dir = JobDirectory::Create(kParent, id);
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path(), "/tmp/stoker." + id);
  EXPECT_EQ(dir->socket_path(), "/tmp/stoker." + id + "/data.sock");
  EXPECT_EQ(DataSocketPath(kParent, id), dir->socket_path());
  struct stat info;
  ASSERT_EQ(stat(dir->path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700);

  std::ofstream(dir->socket_path()) << "stale";
  mkdir((dir->path() + "/sub").c_str(), 0700);
  std::ofstream(dir->path() + "/sub/file") << "x";
  const std::string path = dir->path();
  std::vector<std::string> leftovers = dir->Remove();
  EXPECT_THAT(leftovers, ::testing::UnorderedElementsAre(path + "/data.sock", path + "/sub",
                                                         path + "/sub/file"));
  EXPECT_FALSE(PathExists(path));
  EXPECT_THAT(dir->Remove(), IsEmpty());  // a second Remove does nothing
}

TEST(JobDirectoryTest, DestructorRemovesIt) {
  const std::string path = JobDirectoryPath(kParent, UniqueId("job2"));
  {
    absl::StatusOr<JobDirectory> dir = JobDirectory::Create(kParent, UniqueId("job2"));
    ASSERT_OK(dir);
    JobDirectory moved = std::move(*dir);
    EXPECT_TRUE(PathExists(path));
  }
  EXPECT_FALSE(PathExists(path));
}

TEST(JobDirectoryTest, RefusesAnExistingDirectory) {
  const std::string id = UniqueId("taken");
  const std::string path = JobDirectoryPath(kParent, id);
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  absl::StatusOr<JobDirectory> dir = JobDirectory::Create(kParent, id);
  EXPECT_THAT(dir, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("--job_id " + id));
  EXPECT_TRUE(PathExists(path));  // not ours: left alone
  rmdir(path.c_str());
}

TEST(JobDirectoryTest, RefusesASocketPathTooLongForSockaddrUn) {
  const std::string parent = "/tmp/" + std::string(100, 'p');
  absl::StatusOr<JobDirectory> dir = JobDirectory::Create(parent, "job");
  EXPECT_THAT(dir, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("too long"));
}

TEST(SharedMemoryLeftoversTest, RemovesOnlyThisJobsSegments) {
  ASSERT_OK_AND_ASSIGN(const TempDir shm_temp, TempDir::Create("shm"));
  const std::string shm = shm_temp.path();
  for (const char* name : {"stoker.j1.ring.0", "stoker.j1.ring.1", "stoker.j10.ring.0", "stoker.j1",
                           "other.j1.ring.0"}) {
    std::ofstream(shm + "/" + name) << "x";
  }
  EXPECT_THAT(RemoveSharedMemoryLeftovers(shm, "j1"),
              ElementsAre(shm + "/stoker.j1.ring.0", shm + "/stoker.j1.ring.1"));
  EXPECT_THAT(ListEntries(shm, "stoker."),
              ::testing::UnorderedElementsAre("stoker.j10.ring.0", "stoker.j1"));
  EXPECT_THAT(RemoveSharedMemoryLeftovers(shm, "j1"), IsEmpty());
}

TEST(JobIdOfSocketPathTest, ReadsTheJobIdOfBothKindsOfSocket) {
  EXPECT_EQ(JobIdOfSocketPath(DataSocketPath("/tmp", "job-1")), "job-1");
  EXPECT_EQ(JobIdOfSocketPath(NodeSocketPath("/tmp", "job_2", 3)), "job_2");
  EXPECT_EQ(JobIdOfSocketPath("/run/other/data.sock"), "");
  EXPECT_EQ(JobIdOfSocketPath("/tmp/stoker.a.b/data.sock"), "");
  EXPECT_EQ(JobIdOfSocketPath("/tmp/x.sock"), "");
  EXPECT_EQ(JobIdOfSocketPath("/tmp/stoker.j/nodeX.sock"), "");
  EXPECT_EQ(JobIdOfSocketPath("/tmp/stoker.j/node.sock"), "");
  EXPECT_EQ(JobIdOfSocketPath("/tmp/stoker.j.node0.sock"), "");
  EXPECT_EQ(JobIdOfSocketPath("stoker.j/node0.sock"), "j");
}

TEST(SharedMemoryLeftoversTest, ObjectsOfAnotherUserAreLeftAlsoForRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make files of another user";
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("foreign"));
  const std::string dir = dir_temp.path();
  ASSERT_OK_AND_ASSIGN(const TempDir shm_temp, TempDir::Create("foreign_shm"));
  const std::string shm = shm_temp.path();
  std::ofstream(shm + "/stoker.j1.ring.0") << "x";
  std::ofstream(shm + "/stoker.j1.ring.1") << "x";
  if (chown((shm + "/stoker.j1.ring.1").c_str(), 65534, 65534) != 0) {
    GTEST_SKIP() << "cannot give a file to another user here (a sandbox's user namespace?)";
  }
  EXPECT_THAT(RemoveSharedMemoryLeftovers(shm, "j1"), ElementsAre(shm + "/stoker.j1.ring.0"));
  EXPECT_THAT(ListEntries(shm, "stoker."), ElementsAre("stoker.j1.ring.1"));
  // A job directory of another user, and another user's file in this user's.
  const std::string foreign = JobDirectoryPath(dir, "j2");
  ASSERT_EQ(mkdir(foreign.c_str(), 0700), 0);
  ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  EXPECT_THAT(RemoveJobDirectory(dir, "j2"), IsEmpty());
  EXPECT_EQ(access(foreign.c_str(), F_OK), 0);
  const std::string mine = JobDirectoryPath(dir, "j3");
  ASSERT_EQ(mkdir(mine.c_str(), 0700), 0);
  std::ofstream(mine + "/data.sock") << "x";
  std::ofstream(mine + "/planted") << "x";
  ASSERT_EQ(chown((mine + "/planted").c_str(), 65534, 65534), 0);
  EXPECT_THAT(RemoveJobDirectory(dir, "j3"), ElementsAre(mine + "/data.sock"));
  EXPECT_EQ(access((mine + "/planted").c_str(), F_OK), 0);
}

TEST(NodeSocketTest, PathNamesJobAndNodeInsideTheJobDirectory) {
  EXPECT_EQ(NodeSocketPath("/tmp", "j1", 3), "/tmp/stoker.j1/node3.sock");
  EXPECT_OK(CheckNodeSocketPath("/tmp", std::string(kMaxJobIdLength, 'j'), 999));
  const absl::Status too_long = CheckNodeSocketPath("/tmp/" + std::string(100, 'p'), "job", 0);
  EXPECT_THAT(too_long, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(too_long.message()), HasSubstr("too long"));
}

// The mode bits of `path` (lstat), or -1.
int ModeOf(const std::string& path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0 ? static_cast<int>(info.st_mode & 07777) : -1;
}

TEST(NodeJobDirectoryTest, IsMadeOwnerOnlyWhateverTheUmask) {
  for (const mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0700}}) {
    const std::string job = UniqueId(absl::StrCat("node-umask-", mask));
    const mode_t old_mask = umask(mask);
    absl::StatusOr<std::string> dir = MakeNodeJobDirectory(kParent, job);
    umask(old_mask);
    ASSERT_OK(dir);
    EXPECT_EQ(*dir, JobDirectoryPath(kParent, job));
    EXPECT_EQ(ModeOf(*dir), 0700) << "umask " << mask;
    struct stat info;
    ASSERT_EQ(lstat(dir->c_str(), &info), 0);
    EXPECT_EQ(info.st_uid, geteuid());
    RemoveJobDirectoryIfEmpty(*dir);
    EXPECT_FALSE(PathExists(*dir));
  }
}

TEST(NodeJobDirectoryTest, AnotherNodeOfTheJobFindsItAndTheLastOneRemovesIt) {
  const std::string job = UniqueId("node-shared");
  absl::StatusOr<std::string> first = MakeNodeJobDirectory(kParent, job);
  ASSERT_OK(first);
  std::ofstream(NodeSocketPath(kParent, job, 0)) << "x";
  absl::StatusOr<std::string> second = MakeNodeJobDirectory(kParent, job);
  ASSERT_OK(second);
  EXPECT_EQ(*second, *first);
  std::ofstream(NodeSocketPath(kParent, job, 1)) << "x";

  unlink(NodeSocketPath(kParent, job, 0).c_str());
  RemoveJobDirectoryIfEmpty(*first);  // node 1's socket is still there
  EXPECT_TRUE(PathExists(NodeSocketPath(kParent, job, 1)));
  unlink(NodeSocketPath(kParent, job, 1).c_str());
  RemoveJobDirectoryIfEmpty(*first);
  EXPECT_FALSE(PathExists(*first));
  RemoveJobDirectoryIfEmpty(*first);  // gone already: nothing to do
}

TEST(NodeJobDirectoryTest, ADirectoryWithAnotherModeIsRefusedByName) {
  const std::string job = UniqueId("node-mode");
  const std::string dir = JobDirectoryPath(kParent, job);
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  absl::StatusOr<std::string> made = MakeNodeJobDirectory(kParent, job);
  EXPECT_THAT(made, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(made.status().message()),
              HasSubstr(absl::StrCat("job directory ", dir, " exists but is a directory of uid ",
                                     geteuid(), " with mode 0755")));
  EXPECT_THAT(std::string(made.status().message()), HasSubstr("mode 0700"));
  EXPECT_EQ(ModeOf(dir), 0755);  // refused, not changed
  rmdir(dir.c_str());
}

TEST(NodeJobDirectoryTest, ASymlinkOrAFileUnderTheNameIsRefusedByName) {
  ASSERT_OK_AND_ASSIGN(const TempDir target_temp, TempDir::Create("node-target"));
  const std::string target = target_temp.path();
  const std::string link_job = UniqueId("node-link");
  const std::string link = JobDirectoryPath(kParent, link_job);
  ASSERT_EQ(chmod(target.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  absl::StatusOr<std::string> made = MakeNodeJobDirectory(kParent, link_job);
  EXPECT_THAT(made, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(made.status().message()),
              HasSubstr(absl::StrCat(link, " exists but is a symbolic link")));
  unlink(link.c_str());

  const std::string file_job = UniqueId("node-file");
  const std::string file = JobDirectoryPath(kParent, file_job);
  std::ofstream(file) << "x";
  made = MakeNodeJobDirectory(kParent, file_job);
  EXPECT_THAT(made, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(made.status().message()),
              HasSubstr(absl::StrCat(file, " exists but is not a directory")));
  unlink(file.c_str());
}

TEST(NodeJobDirectoryTest, ADirectoryOfAnotherUserIsRefusedAlsoForRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another user";
  const std::string job = UniqueId("node-foreign");
  const std::string dir = JobDirectoryPath(kParent, job);
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  if (chown(dir.c_str(), 65534, 65534) != 0) {
    rmdir(dir.c_str());
    GTEST_SKIP() << "cannot give a directory to another user here (a sandbox's user namespace?)";
  }
  absl::StatusOr<std::string> made = MakeNodeJobDirectory(kParent, job);
  EXPECT_THAT(made, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(
      std::string(made.status().message()),
      HasSubstr(absl::StrCat(dir, " exists but is a directory of uid 65534 with mode 0700")));
  RemoveJobDirectoryIfEmpty(dir);  // another user's: left
  EXPECT_TRUE(PathExists(dir));
  rmdir(dir.c_str());
}

TEST(NodeJobDirectoryTest, ABadJobIdIsRefused) {
  EXPECT_THAT(MakeNodeJobDirectory(kParent, "a/b"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stoker::launcher
