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

// A directory for the owner records and one for the shared-memory segments, the test's own.
class JobOwnerRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dir_temp_, TempDir::Create("owner"));
    ASSERT_OK_AND_ASSIGN(shm_temp_, TempDir::Create("shm"));
    dir_ = dir_temp_.path();
    shm_ = shm_temp_.path();
  }

  TempDir dir_temp_;
  TempDir shm_temp_;
  std::string dir_;
  std::string shm_;
};

class RemoveStaleJobsTest : public JobOwnerRecordTest {};

TEST_F(JobOwnerRecordTest, TheRecordIsOwnerOnlyAndGoesWithTheObject) {
  const std::string path = JobOwnerPath(dir_, "job1");
  {
    absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir_, dir_, "job1");
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

TEST_F(JobOwnerRecordTest, ARunningJobKeepsItsId) {
  absl::StatusOr<JobOwnerRecord> first = JobOwnerRecord::Create(dir_, dir_, "job1");
  ASSERT_OK(first);
  absl::StatusOr<JobOwnerRecord> second = JobOwnerRecord::Create(dir_, dir_, "job1");
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("running launcher pid ", getpid())));
}

TEST_F(JobOwnerRecordTest, TheIdOfADeadJobIsTakenOverAndItsFilesRemoved) {
  WriteRecord(dir_, "job1", GoneProcess());
  LeaveJobFiles(dir_, shm_, "job1", "node0.sock");
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir_, shm_, "job1");
  ASSERT_OK(record);
  EXPECT_FALSE(PathExists(absl::StrCat(dir_, "/stoker.job1")));
  EXPECT_FALSE(PathExists(absl::StrCat(shm_, "/stoker.job1.ring.0")));
  EXPECT_EQ(ProcessIdentity::FromText(testing::ReadFileOrEmpty(record->path()))->pid, getpid());
}

TEST_F(JobOwnerRecordTest, AnUnreadableRecordIsNotTakenOver) {
  std::ofstream(JobOwnerPath(dir_, "job1")) << "garbage";
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir_, dir_, "job1");
  EXPECT_THAT(record, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(record.status().message(), HasSubstr("remove it if no such job runs"));
}

TEST_F(JobOwnerRecordTest, TheRecordIsLockedForTheJobsLife) {
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir_, dir_, "job1");
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

TEST_F(RemoveStaleJobsTest, AStaleRecordWhoseLockIsHeldIsLeftAlone) {
  // A record whose pid is gone but whose lock someone holds (the job that is taking the id
  // over right now): judging it must wait for that one.
  WriteRecord(dir_, "taken-job", GoneProcess());
  LeaveJobFiles(dir_, shm_, "taken-job");
  const int fd = open(JobOwnerPath(dir_, "taken-job").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_THAT(RemoveStaleJobs(dir_, shm_), IsEmpty());
  EXPECT_TRUE(PathExists(absl::StrCat(shm_, "/stoker.taken-job.ring.0")));
  absl::StatusOr<JobOwnerRecord> record = JobOwnerRecord::Create(dir_, shm_, "taken-job");
  EXPECT_THAT(record, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(record.status().message(), HasSubstr("it holds the lock of"));
  close(fd);
  ASSERT_EQ(RemoveStaleJobs(dir_, shm_).size(), 1u);
  EXPECT_FALSE(PathExists(absl::StrCat(shm_, "/stoker.taken-job.ring.0")));
}

TEST_F(RemoveStaleJobsTest, ADeadNodesJobDirectoryGoesWithItsSockets) {
  WriteRecord(dir_, "dead-node", GoneProcess());
  LeaveJobFiles(dir_, shm_, "dead-node", "node1.sock");
  const std::vector<StaleJob> stale = RemoveStaleJobs(dir_, shm_);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_THAT(stale[0].removed, ElementsAre(absl::StrCat(dir_, "/stoker.dead-node/node1.sock"),
                                            absl::StrCat(dir_, "/stoker.dead-node"),
                                            absl::StrCat(shm_, "/stoker.dead-node.ring.0"),
                                            absl::StrCat(dir_, "/stoker.dead-node.owner")));
  EXPECT_THAT(::stoker::testing::ListEntries(dir_, "stoker."), ::testing::IsEmpty());
}

TEST_F(RemoveStaleJobsTest, OnlyJobsWhoseOwnerIsGoneAreRemoved) {
  const ProcessIdentity gone = GoneProcess();
  WriteRecord(dir_, "dead-job", gone);
  LeaveJobFiles(dir_, shm_, "dead-job");
  absl::StatusOr<JobOwnerRecord> live = JobOwnerRecord::Create(dir_, shm_, "live-job");
  ASSERT_OK(live);
  LeaveJobFiles(dir_, shm_, "live-job");
  ProcessIdentity elsewhere = gone;
  elsewhere.pid_namespace = "pid:[1]";
  WriteRecord(dir_, "other-namespace", elsewhere);
  Touch(absl::StrCat(shm_, "/stoker.other-namespace.ring.0"));

  const std::vector<StaleJob> stale = RemoveStaleJobs(dir_, shm_);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].job_id, "dead-job");
  EXPECT_EQ(stale[0].owner_pid, gone.pid);
  EXPECT_THAT(stale[0].removed, ElementsAre(absl::StrCat(dir_, "/stoker.dead-job/data.sock"),
                                            absl::StrCat(dir_, "/stoker.dead-job"),
                                            absl::StrCat(shm_, "/stoker.dead-job.ring.0"),
                                            absl::StrCat(dir_, "/stoker.dead-job.owner")));
  EXPECT_TRUE(PathExists(absl::StrCat(dir_, "/stoker.live-job/data.sock")));
  EXPECT_TRUE(PathExists(absl::StrCat(shm_, "/stoker.live-job.ring.0")));
  EXPECT_TRUE(PathExists(absl::StrCat(shm_, "/stoker.other-namespace.ring.0")));
  EXPECT_THAT(RemoveStaleJobs(dir_, shm_), IsEmpty());
}

}  // namespace
}  // namespace stoker::launcher
