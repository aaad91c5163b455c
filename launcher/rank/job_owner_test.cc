#include "launcher/rank/job_owner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

// The identity of a process that has exited and been reaped.
ProcessIdentity GoneProcess() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  ProcessIdentity gone = *ProcessIdentity::Self();
  gone.pid = child;
  return gone;
}

void WriteRecord(const std::string& dir, const std::string& job_id, const ProcessIdentity& owner) {
  std::ofstream(JobOwnerPath(dir, job_id)) << owner.ToText();
}

// A job's files as a killed launcher leaves them (socket "data.sock"), or a node's local
// rank 0 killed with its data service (socket "node0.sock").
void LeaveJobFiles(const std::string& dir, const std::string& shm, const std::string& job_id,
                   const std::string& socket = "data.sock") {
  ASSERT_EQ(mkdir(absl::StrCat(dir, "/stoker.", job_id).c_str(), 0700), 0);
  Touch(absl::StrCat(dir, "/stoker.", job_id, "/", socket));
  Touch(absl::StrCat(shm, "/stoker.", job_id, ".ring.0"));
}

TEST(ProcessIdentityTest, SelfRoundTripsThroughText) {
  absl::StatusOr<ProcessIdentity> self = ProcessIdentity::Self();
  ASSERT_OK(self);
  EXPECT_EQ(self->pid, getpid());
  EXPECT_GT(self->start_time, 0u);
  absl::StatusOr<ProcessIdentity> back = ProcessIdentity::FromText(self->ToText());
  ASSERT_OK(back);
  EXPECT_EQ(back->pid, self->pid);
  EXPECT_EQ(back->start_time, self->start_time);
  EXPECT_EQ(back->pid_namespace, self->pid_namespace);
  EXPECT_EQ(back->boot_id, self->boot_id);
}

TEST(ProcessIdentityTest, GarbageIsNotAnIdentity) {
  EXPECT_THAT(ProcessIdentity::FromText(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ProcessIdentity::FromText("12 x ns boot"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ProcessIdentity::FromText("-3 5 ns boot"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(JudgeOwnerTest, ThisProcessIsAlive) {
  EXPECT_EQ(JudgeOwner(*ProcessIdentity::Self()), OwnerState::kAlive);
}

TEST(JudgeOwnerTest, AnExitedProcessIsGone) {
  EXPECT_EQ(JudgeOwner(GoneProcess()), OwnerState::kGone);
}

TEST(JudgeOwnerTest, AReusedPidIsGone) {
  ProcessIdentity earlier = *ProcessIdentity::Self();
  earlier.start_time -= 1;
  EXPECT_EQ(JudgeOwner(earlier), OwnerState::kGone);
}

TEST(JudgeOwnerTest, AnOwnerOfAnEarlierBootIsGone) {
  ProcessIdentity before_reboot = *ProcessIdentity::Self();
  before_reboot.boot_id = "another-boot";
  EXPECT_EQ(JudgeOwner(before_reboot), OwnerState::kGone);
}

TEST(JudgeOwnerTest, AnOwnerInAnotherPidNamespaceIsUnknown) {
  ProcessIdentity elsewhere = GoneProcess();
  elsewhere.pid_namespace = "pid:[1]";
  EXPECT_EQ(JudgeOwner(elsewhere), OwnerState::kUnknown);
}

TEST(JobOwnerRecordTest, TheRecordIsOwnerOnlyAndGoesWithTheObject) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  const std::string path = JobOwnerPath(dir, "job1");
  {
    absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir, dir, "job1");
    ASSERT_OK(record);
    EXPECT_EQ(record->path(), path);
    struct stat info;
    ASSERT_EQ(stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600);
    EXPECT_EQ(ProcessIdentity::FromText(testing::ReadFileOrEmpty(path))->pid, getpid());
    JobOwnerRecord moved = std::move(*record);
    EXPECT_TRUE(PathExists(path));
  }
  EXPECT_FALSE(PathExists(path));
}

TEST(JobOwnerRecordTest, ARunningJobKeepsItsId) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  absl::StatusOr<JobOwnerRecord> first = JobOwnerRecord::Create(dir, dir, "job1");
  ASSERT_OK(first);
  absl::StatusOr<JobOwnerRecord> second = JobOwnerRecord::Create(dir, dir, "job1");
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("running launcher pid ", getpid())));
}

TEST(JobOwnerRecordTest, TheIdOfADeadJobIsTakenOverAndItsFilesRemoved) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  ASSERT_OK_AND_ASSIGN(const TempDir shm_temp, TempDir::Create("shm"));
  const std::string shm = shm_temp.path();
  WriteRecord(dir, "job1", GoneProcess());
  LeaveJobFiles(dir, shm, "job1", "node0.sock");
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir, shm, "job1");
  ASSERT_OK(record);
  EXPECT_FALSE(PathExists(absl::StrCat(dir, "/stoker.job1")));
  EXPECT_FALSE(PathExists(absl::StrCat(shm, "/stoker.job1.ring.0")));
  EXPECT_EQ(ProcessIdentity::FromText(testing::ReadFileOrEmpty(record->path()))->pid, getpid());
}

TEST(JobOwnerRecordTest, AnUnreadableRecordIsNotTakenOver) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  std::ofstream(JobOwnerPath(dir, "job1")) << "garbage";
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir, dir, "job1");
  EXPECT_THAT(record, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(record.status().message(), HasSubstr("remove it if no such job runs"));
}

TEST(JobOwnerRecordTest, TheRecordIsLockedForTheJobsLife) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir, dir, "job1");
  ASSERT_OK(record);
  const int fd = open(record->path().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(errno, EWOULDBLOCK);
  JobOwnerRecord moved = std::move(*record);  // the lock goes with the record
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0);
  { JobOwnerRecord gone = std::move(moved); }  // the record and its lock go
  EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  close(fd);
}

TEST(RemoveStaleJobsTest, AStaleRecordWhoseLockIsHeldIsLeftAlone) {
  // A record whose pid is gone but whose lock someone holds (the job that is taking the id
  // over right now): judging it must wait for that one.
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  ASSERT_OK_AND_ASSIGN(const TempDir shm_temp, TempDir::Create("shm"));
  const std::string shm = shm_temp.path();
  WriteRecord(dir, "taken-job", GoneProcess());
  LeaveJobFiles(dir, shm, "taken-job");
  const int fd = open(JobOwnerPath(dir, "taken-job").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_THAT(RemoveStaleJobs(dir, shm), IsEmpty());
  EXPECT_TRUE(PathExists(absl::StrCat(shm, "/stoker.taken-job.ring.0")));
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir, shm, "taken-job");
  EXPECT_THAT(record, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(record.status().message(), HasSubstr("it holds the lock of"));
  close(fd);
  ASSERT_EQ(RemoveStaleJobs(dir, shm).size(), 1u);
  EXPECT_FALSE(PathExists(absl::StrCat(shm, "/stoker.taken-job.ring.0")));
}

TEST(RemoveStaleJobsTest, ADeadNodesJobDirectoryGoesWithItsSockets) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  ASSERT_OK_AND_ASSIGN(const TempDir shm_temp, TempDir::Create("shm"));
  const std::string shm = shm_temp.path();
  WriteRecord(dir, "dead-node", GoneProcess());
  LeaveJobFiles(dir, shm, "dead-node", "node1.sock");
  const std::vector<StaleJob> stale = RemoveStaleJobs(dir, shm);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_THAT(stale[0].removed, ElementsAre(absl::StrCat(dir, "/stoker.dead-node/node1.sock"),
                                            absl::StrCat(dir, "/stoker.dead-node"),
                                            absl::StrCat(shm, "/stoker.dead-node.ring.0"),
                                            absl::StrCat(dir, "/stoker.dead-node.owner")));
  EXPECT_THAT(testing::ListEntries(dir, "stoker."), ::testing::IsEmpty());
}

TEST(RemoveStaleJobsTest, OnlyJobsWhoseOwnerIsGoneAreRemoved) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("owner"));
  const std::string dir = dir_temp.path();
  ASSERT_OK_AND_ASSIGN(const TempDir shm_temp, TempDir::Create("shm"));
  const std::string shm = shm_temp.path();
  const ProcessIdentity gone = GoneProcess();
  WriteRecord(dir, "dead-job", gone);
  LeaveJobFiles(dir, shm, "dead-job");
  absl::StatusOr<JobOwnerRecord> live = JobOwnerRecord::Create(dir, shm, "live-job");
  ASSERT_OK(live);
  LeaveJobFiles(dir, shm, "live-job");
  ProcessIdentity elsewhere = gone;
  elsewhere.pid_namespace = "pid:[1]";
  WriteRecord(dir, "other-namespace", elsewhere);
  Touch(absl::StrCat(shm, "/stoker.other-namespace.ring.0"));

  const std::vector<StaleJob> stale = RemoveStaleJobs(dir, shm);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].job_id, "dead-job");
  EXPECT_EQ(stale[0].owner_pid, gone.pid);
  EXPECT_THAT(stale[0].removed, ElementsAre(absl::StrCat(dir, "/stoker.dead-job/data.sock"),
                                            absl::StrCat(dir, "/stoker.dead-job"),
                                            absl::StrCat(shm, "/stoker.dead-job.ring.0"),
                                            absl::StrCat(dir, "/stoker.dead-job.owner")));
  EXPECT_TRUE(PathExists(absl::StrCat(dir, "/stoker.live-job/data.sock")));
  EXPECT_TRUE(PathExists(absl::StrCat(shm, "/stoker.live-job.ring.0")));
  EXPECT_TRUE(PathExists(absl::StrCat(shm, "/stoker.other-namespace.ring.0")));
  EXPECT_THAT(RemoveStaleJobs(dir, shm), IsEmpty());
}

}  // namespace
}  // namespace stoker::launcher
