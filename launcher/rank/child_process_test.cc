#include "launcher/rank/child_process.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::IsProcessAlive;
using ::stoker::launcher::testing::ReadFileOrEmpty;
using ::stoker::launcher::testing::WaitForFile;
using ::stoker::launcher::testing::WaitForProcessExit;
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

ChildSpec Shell(const std::string& script) {
  return ChildSpec{"test shell", "/bin/sh", {"sh", "-c", script}, {}};
}

pid_t ReadPid(const std::string& path) {
  EXPECT_TRUE(WaitForFile(path, absl::Seconds(10))) << path;
  int pid = 0;
  EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFileOrEmpty(path)), &pid)) << path;
  return pid;
}

// Forks a middle process that spawns `spec`, reports the child's pid and waits to be killed.
// Sets `middle` and `child` to the two pids.
void SpawnThroughMiddleProcess(const ChildSpec& spec, pid_t* middle, pid_t* child) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  *middle = fork();
  ASSERT_GE(*middle, 0);
  if (*middle == 0) {
    close(fds[0]);
    absl::StatusOr<ChildProcess> spawned = ChildProcess::Spawn(spec);
    const pid_t pid = spawned.ok() ? spawned->pid() : -1;
    if (write(fds[1], &pid, sizeof(pid)) != sizeof(pid)) _exit(1);
    pause();
    _exit(0);
  }
  close(fds[1]);
  *child = -1;
  ASSERT_EQ(read(fds[0], child, sizeof(*child)), static_cast<ssize_t>(sizeof(*child)));
  close(fds[0]);
  ASSERT_GT(*child, 0);
}

TEST(ExitStatusTest, DescribesCodesAndSignalsLikeAShell) {
  EXPECT_EQ(ExitStatus::Exited(3).ToString(), "exited with code 3");
  EXPECT_EQ(ExitStatus::Exited(3).ShellCode(), 3);
  EXPECT_EQ(ExitStatus::Signaled(SIGKILL).ToString(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(ExitStatus::Signaled(SIGTERM).ShellCode(), 143);
  EXPECT_TRUE(ExitStatus::Exited(0).success());
  EXPECT_FALSE(ExitStatus::Signaled(SIGTERM).success());
  EXPECT_EQ(ExitStatus::Lost().ShellCode(), 1);
  EXPECT_EQ(DescribeSignal(SIGINT), "signal 2 (SIGINT)");
  EXPECT_EQ(DescribeSignal(40), "signal 40");
}

TEST(ChildProcessTest, ReportsExitCode) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("exit 3"));
  ASSERT_OK(child);
  absl::StatusOr<ExitStatus> status = child->Wait(absl::Seconds(10));
  ASSERT_OK(status);
  EXPECT_EQ(*status, ExitStatus::Exited(3));
  EXPECT_TRUE(child->has_exited());
}

TEST(ChildProcessTest, ReportsDeathBySignal) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("kill -SEGV $$"));
  ASSERT_OK(child);
  absl::StatusOr<ExitStatus> status = child->Wait(absl::Seconds(10));
  ASSERT_OK(status);
  EXPECT_EQ(*status, ExitStatus::Signaled(SIGSEGV));
}

TEST(ChildProcessTest, MissingProgramFailsSpawnNamingChildAndProgram) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn({"data service", "/nonexistent/data_service", {}, {}});
  EXPECT_THAT(child, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(child.status().message()), HasSubstr("data service"));
  EXPECT_THAT(std::string(child.status().message()), HasSubstr("/nonexistent/data_service"));
  // The failed child was reaped: there is nothing left to wait for.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
}

TEST(ChildProcessTest, ProgramMustBeAPath) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn({"mpirun", "mpirun", {}, {}});
  EXPECT_THAT(child, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChildProcessTest, RunsInItsOwnProcessGroup) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("sleep 30"));
  ASSERT_OK(child);
  EXPECT_EQ(getpgid(child->pid()), child->pid());
  EXPECT_NE(getpgid(child->pid()), getpgrp());
}

TEST(ChildProcessTest, SetsEnvironmentOverTheInheritedOne) {
  setenv("STOKER_CHILD_TEST_INHERITED", "yes", 1);
  setenv("STOKER_CHILD_TEST_REPLACED", "old", 1);
  ChildSpec spec = Shell(
      "test \"$STOKER_CHILD_TEST_INHERITED\" = yes && test \"$STOKER_CHILD_TEST_REPLACED\" = new "
      "&& test \"$STOKER_CHILD_TEST_ADDED\" = 'a b'");
  spec.env = {"STOKER_CHILD_TEST_REPLACED=new", "STOKER_CHILD_TEST_ADDED=a b"};
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(spec);
  ASSERT_OK(child);
  EXPECT_EQ(*child->Wait(absl::Seconds(10)), ExitStatus::Exited(0));
}

TEST(ChildProcessTest, AChildMayStartWithSigpipeIgnored) {
  ChildSpec spec = Shell("kill -PIPE $$; exit 7");
  absl::StatusOr<ChildProcess> dies = ChildProcess::Spawn(spec);
  ASSERT_OK(dies);
  EXPECT_EQ(*dies->Wait(absl::Seconds(10)), ExitStatus::Signaled(SIGPIPE));
  spec.ignore_sigpipe = true;
  absl::StatusOr<ChildProcess> lives = ChildProcess::Spawn(spec);
  ASSERT_OK(lives);
  EXPECT_EQ(*lives->Wait(absl::Seconds(10)), ExitStatus::Exited(7));
}

TEST(ChildProcessTest, StdinIsDevNull) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("read line; test $? -ne 0"));
  ASSERT_OK(child);
  EXPECT_EQ(*child->Wait(absl::Seconds(10)), ExitStatus::Exited(0));
}

TEST(ChildProcessTest, WaitTimesOutWhileChildRuns) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("sleep 30"));
  ASSERT_OK(child);
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> status = child->Wait(absl::Milliseconds(100));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_FALSE(child->has_exited());
}

TEST(ChildProcessTest, TerminateKillsTheWholeGroupIncludingGrandchildren) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("terminate"));
  const std::string dir = dir_temp.path();
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn(Shell(absl::StrCat("sleep 1000 & echo $! > ", dir, "/grandchild; wait")));
  ASSERT_OK(child);
  const pid_t grandchild = ReadPid(dir + "/grandchild");
  ASSERT_TRUE(IsProcessAlive(grandchild));

  absl::StatusOr<ExitStatus> status = child->Terminate(absl::Seconds(10));
  ASSERT_OK(status);
  EXPECT_EQ(*status, ExitStatus::Signaled(SIGTERM));
  EXPECT_TRUE(WaitForProcessExit(grandchild, absl::Seconds(5)));
}

TEST(ChildProcessTest, TerminateEscalatesToSigkillAfterGrace) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("stubborn"));
  const std::string dir = dir_temp.path();
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell(
      absl::StrCat("trap '' TERM; echo ready > ", dir, "/ready; while :; do sleep 0.05; done")));
  ASSERT_OK(child);
  ASSERT_TRUE(WaitForFile(dir + "/ready", absl::Seconds(10)));
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> status = child->Terminate(absl::Milliseconds(300));
  ASSERT_OK(status);
  EXPECT_EQ(*status, ExitStatus::Signaled(SIGKILL));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ChildProcessTest, TerminateOfAnExitedChildReturnsItsStatus) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("exit 4"));
  ASSERT_OK(child);
  ASSERT_OK(child->Wait(absl::Seconds(10)));
  absl::StatusOr<ExitStatus> status = child->Terminate(absl::Seconds(1));
  ASSERT_OK(status);
  EXPECT_EQ(*status, ExitStatus::Exited(4));
  EXPECT_THAT(child->SignalGroup(SIGTERM), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ChildProcessTest, ReapingSweepsWhatTheChildLeftInItsGroup) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create("sweep"));
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(
      Shell(absl::StrCat("sleep 1000 & echo $! > ", dir.Join("grandchild"), "; exit 0")));
  ASSERT_OK(child);
  const pid_t grandchild = ReadPid(dir.Join("grandchild"));
  EXPECT_EQ(*child->Wait(absl::Seconds(10)), ExitStatus::Exited(0));
  EXPECT_TRUE(WaitForProcessExit(grandchild, absl::Seconds(5)));
}

TEST(ChildProcessTest, DestructorKillsAndReaps) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("destructor"));
  const std::string dir = dir_temp.path();
  pid_t pid = -1;
  pid_t grandchild = -1;
  {
    absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(
        Shell(absl::StrCat("sleep 1000 & echo $! > ", dir, "/grandchild; wait")));
    ASSERT_OK(child);
    pid = child->pid();
    grandchild = ReadPid(dir + "/grandchild");
  }
  // Reaped, not a zombie: the pid is gone from this process's children.
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_TRUE(WaitForProcessExit(grandchild, absl::Seconds(5)));
}

TEST(ChildProcessTest, MovedOwnerKeepsTheChild) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("exit 6"));
  ASSERT_OK(child);
  ChildProcess moved = std::move(*child);
  EXPECT_EQ(*moved.Wait(absl::Seconds(10)), ExitStatus::Exited(6));
}

TEST(ChildProcessTest, NothingOutlivesAKilledParent) {
  // A middle process spawns a child, reports its pid and is SIGKILLed, as a launcher killed
  // with `kill -9` would be. PR_SET_PDEATHSIG must take the child down with it.
  pid_t middle = -1;
  pid_t orphan = -1;
  ASSERT_NO_FATAL_FAILURE(SpawnThroughMiddleProcess(Shell("sleep 1000"), &middle, &orphan));
  ASSERT_TRUE(IsProcessAlive(orphan));
  kill(middle, SIGKILL);
  waitpid(middle, nullptr, 0);
  EXPECT_TRUE(WaitForProcessExit(orphan, absl::Seconds(5)));
}

TEST(ChildProcessTest, ParentDeathSignalCanBeSigtermForChildrenThatCleanUp) {
  // As NothingOutlivesAKilledParent, but the child asked for SIGTERM and traps it, the way
  // the data service removes its socket and segments when the rank that started it dies.
  ASSERT_OK_AND_ASSIGN(const TempDir out_temp, TempDir::Create("pdeathsig"));
  const std::string out = out_temp.path();
  ChildSpec spec =
      Shell(absl::StrCat("trap 'echo cleaned > ", out, "/term; exit 0' TERM; echo $$ > ", out,
                         "/ready; while :; do sleep 0.05; done"));
  spec.parent_death_signal = SIGTERM;
  pid_t middle = -1;
  pid_t orphan = -1;
  ASSERT_NO_FATAL_FAILURE(SpawnThroughMiddleProcess(spec, &middle, &orphan));
  ASSERT_TRUE(WaitForFile(out + "/ready", absl::Seconds(10)));
  kill(middle, SIGKILL);
  waitpid(middle, nullptr, 0);
  EXPECT_TRUE(WaitForFile(out + "/term", absl::Seconds(5)));
  EXPECT_EQ(ReadFileOrEmpty(out + "/term"), "cleaned\n");
  EXPECT_TRUE(WaitForProcessExit(orphan, absl::Seconds(5)));
}

TEST(ChildProcessTest, UseAllCpusUndoesTheParentsCpuBinding) {
  cpu_set_t original;
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  if (CPU_COUNT(&original) < 2) GTEST_SKIP() << "needs 2 CPUs";
  ASSERT_OK_AND_ASSIGN(const TempDir out_temp, TempDir::Create("affinity"));
  const std::string out = out_temp.path();
  const std::string script =
      absl::StrCat("grep Cpus_allowed_list /proc/self/status > ", out, "/$1");
  // The test process stands in for an MPI rank bound to its first allowed CPU.
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  for (bool all : {false, true}) {
    ChildSpec spec{"affinity", "/bin/sh", {"sh", "-c", script, "sh", all ? "all" : "bound"}, {}};
    spec.use_all_cpus = all;
    absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(spec);
    ASSERT_OK(child);
    EXPECT_EQ(*child->Wait(absl::Seconds(10)), ExitStatus::Exited(0));
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(original), &original), 0);
  const std::string parent = ReadFileOrEmpty("/proc/self/status");
  const size_t at = parent.find("Cpus_allowed_list");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(ReadFileOrEmpty(out + "/all"), parent.substr(at, parent.find('\n', at) - at + 1));
  EXPECT_EQ(ReadFileOrEmpty(out + "/bound"), absl::StrCat("Cpus_allowed_list:\t", first, "\n"));
}

TEST(WaitForFirstExitTest, ReturnsTheChildThatExitsFirst) {
  absl::StatusOr<ChildProcess> slow = ChildProcess::Spawn(Shell("sleep 30"));
  absl::StatusOr<ChildProcess> fast = ChildProcess::Spawn(Shell("sleep 0.1; exit 5"));
  ASSERT_TRUE(slow.ok() && fast.ok());
  std::vector<ChildProcess*> children = {&*slow, &*fast};
  absl::StatusOr<WaitResult> result = WaitForFirstExit(children, absl::Seconds(10));
  ASSERT_OK(result);
  EXPECT_EQ(result->event, WaitResult::Event::kExited);
  EXPECT_EQ(result->child, &*fast);
  EXPECT_EQ(fast->exit_status(), ExitStatus::Exited(5));
  EXPECT_FALSE(slow->has_exited());
}

TEST(WaitForFirstExitTest, TimesOut) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("sleep 30"));
  ASSERT_OK(child);
  std::vector<ChildProcess*> children = {&*child};
  absl::StatusOr<WaitResult> result = WaitForFirstExit(children, absl::Milliseconds(50));
  ASSERT_OK(result);
  EXPECT_EQ(result->event, WaitResult::Event::kTimedOut);
}

TEST(WaitForFirstExitTest, WakesWhenTheWakeFdIsReadable) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("sleep 30"));
  ASSERT_OK(child);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  std::vector<ChildProcess*> children = {&*child};
  absl::StatusOr<WaitResult> result = WaitForFirstExit(children, absl::InfiniteDuration(), fds[0]);
  close(fds[0]);
  close(fds[1]);
  ASSERT_OK(result);
  EXPECT_EQ(result->event, WaitResult::Event::kWoken);
}

TEST(TerminateAllTest, EndsEveryChildAtOnce) {
  absl::StatusOr<ChildProcess> a = ChildProcess::Spawn(Shell("sleep 30"));
  absl::StatusOr<ChildProcess> b = ChildProcess::Spawn(Shell("sleep 30"));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<ChildProcess*> children = {&*a, &*b};
  const absl::Time start = absl::Now();
  ASSERT_OK(TerminateAll(children, absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(a->exit_status(), ExitStatus::Signaled(SIGTERM));
  EXPECT_EQ(b->exit_status(), ExitStatus::Signaled(SIGTERM));
}

TEST(TerminateAllTest, AStoppedChildIsContinuedToHandleItsSigterm) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn(Shell("trap 'exit 7' TERM; while :; do sleep 0.05; done"));
  ASSERT_OK(child);
  absl::SleepFor(absl::Milliseconds(100));  // let the shell install its trap
  ASSERT_OK(child->SignalGroup(SIGSTOP));
  std::vector<ChildProcess*> children = {&*child};
  const absl::Time start = absl::Now();
  ASSERT_OK(TerminateAll(children, absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the grace, then SIGKILL
  EXPECT_EQ(child->exit_status(), ExitStatus::Exited(7));
}

TEST(TerminateAllTest, WakeFdCutsTheGracePeriodShort) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn(Shell("trap '' TERM; while :; do sleep 0.05; done"));
  ASSERT_OK(child);
  absl::SleepFor(absl::Milliseconds(100));  // let the shell install its trap
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  std::vector<ChildProcess*> children = {&*child};
  const absl::Time start = absl::Now();
  ASSERT_OK(TerminateAll(children, absl::Seconds(60), fds[0]));
  close(fds[0]);
  close(fds[1]);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(child->exit_status(), ExitStatus::Signaled(SIGKILL));
}

TEST(WaitForFirstExitTest, WorksWithoutPidfdsByPolling) {
  internal::SetPidfdsEnabledForTesting(false);
  absl::StatusOr<ChildProcess> slow = ChildProcess::Spawn(Shell("sleep 30"));
  absl::StatusOr<ChildProcess> fast = ChildProcess::Spawn(Shell("sleep 0.1; exit 5"));
  internal::SetPidfdsEnabledForTesting(true);
  ASSERT_TRUE(slow.ok() && fast.ok());
  ASSERT_EQ(slow->pidfd(), -1);
  std::vector<ChildProcess*> children = {&*slow, &*fast};
  absl::StatusOr<WaitResult> result = WaitForFirstExit(children, absl::Seconds(10));
  ASSERT_OK(result);
  EXPECT_EQ(result->child, &*fast);
  result = WaitForFirstExit({&*slow}, absl::Milliseconds(50));
  ASSERT_OK(result);
  EXPECT_EQ(result->event, WaitResult::Event::kTimedOut);
  EXPECT_EQ(*slow->Terminate(absl::Seconds(10)), ExitStatus::Signaled(SIGTERM));
}

// This process as a child subreaper for the test, and an orphan it adopts.
class SubreaperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<bool> previous = BecomeChildSubreaper();
    ASSERT_OK(previous);
    previous_ = *previous;
  }
  void TearDown() override {
    if (previous_.has_value()) RestoreChildSubreaper(*previous_);
  }

  // Spawns a child whose grandchild runs `sleep <seconds>`, and ends the child. The
  // grandchild left the child's group first, as an mpirun rank does, so no group kill finds
  // it; when the child dies, it is adopted by this process. Sets orphan_ to its pid.
  void AdoptOrphanSleeping(absl::string_view seconds) {
    ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create("orphans"));
    absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell(absl::StrCat(
        "setsid sh -c 'echo $$ > ", dir.Join("orphan"), "; exec sleep ", seconds, "' & wait")));
    ASSERT_OK(child);
    orphan_ = ReadPid(dir.Join("orphan"));
    ASSERT_OK(child->Terminate(absl::Seconds(10)));
  }

  std::optional<bool> previous_;  // whether this process was a subreaper before the test
  pid_t orphan_ = -1;
};

TEST_F(SubreaperTest, SubreaperAdoptsAndKillsOrphansOfADeadChild) {
  ASSERT_NO_FATAL_FAILURE(AdoptOrphanSleeping("1000"));
  ASSERT_TRUE(IsProcessAlive(orphan_));

  std::vector<pid_t> killed = KillStrayChildren({}, absl::Milliseconds(100), absl::Seconds(5));
  EXPECT_THAT(killed, ElementsAre(orphan_));
  EXPECT_FALSE(IsProcessAlive(orphan_));
}

// Open MPI's daemon of a rank started without mpirun ends just after its rank: adopted, it
// is reaped when it exits within the grace, not killed.
TEST_F(SubreaperTest, AnOrphanThatExitsWithinTheGraceIsReapedNotKilled) {
  ASSERT_NO_FATAL_FAILURE(AdoptOrphanSleeping("0.3"));

  EXPECT_THAT(KillStrayChildren({}, absl::Seconds(10), absl::Seconds(5)), ::testing::IsEmpty());
  EXPECT_FALSE(IsProcessAlive(orphan_));
}

TEST(StrayChildrenTest, LeavesKeptChildrenAlone) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(Shell("sleep 1000"));
  ASSERT_OK(child);
  const pid_t keep[] = {child->pid()};
  EXPECT_THAT(KillStrayChildren(keep, absl::Milliseconds(100), absl::Seconds(1)),
              ::testing::IsEmpty());
  EXPECT_TRUE(IsProcessAlive(child->pid()));
}

TEST(MergeEnvironmentTest, ReplacesInPlaceAndAppendsNewNames) {
  EXPECT_THAT(internal::MergeEnvironment({"A=1", "AB=2", "B=3"}, {"A=9", "C=4", "B="}),
              ElementsAre("A=9", "AB=2", "B=", "C=4"));
}

}  // namespace
}  // namespace stoker::launcher
