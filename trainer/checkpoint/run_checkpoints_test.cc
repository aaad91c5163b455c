// A run's checkpoint directory: owner-only files and folders unless --checkpoint_mode, one
// run at a time (its lock), never another run's checkpoints (its identity), and the partial
// files of dead writers removed but never a live one's.
#include "trainer/checkpoint/run_checkpoints.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/atomic_file.h"
#include "common/exit_codes.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;

CheckpointOptions Options(const std::string& dir,
                          const std::string& identity = "model=small_cnn seed=0") {
  CheckpointOptions options;
  options.dir = dir;
  options.run_identity = identity;
  return options;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// A checkpoint of `step` with one tensor held by reference, as a run's snapshot is.
CheckpointWriter Snapshot(int64_t step) {
  CheckpointWriter writer;
  writer.AddInt("step", step);
  auto values = std::make_shared<std::vector<float>>(1000, static_cast<float>(step));
  writer.AddHeldTensor("model/w", "float32", {1000}, values, values->data(), 4000);
  writer.AddString("end", "yes");
  return writer;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RunCheckpointsTest, CheckpointsAreOwnerOnlyAndTheirFoldersToo) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_modes"));
  const std::string dir = dir_temp.path() + "/run/checkpoints";
  const mode_t old_umask = umask(0);
  {
    auto checkpoints = RunCheckpoints::Open(Options(dir), /*writer=*/true);
    ASSERT_OK(checkpoints);
    auto written = checkpoints->Write(7, "bytes");
    ASSERT_OK(written);
    EXPECT_EQ(ModeOf(*written), 0600u);
  }
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_EQ(ModeOf(dir_temp.path() + "/run"), 0700u);
  EXPECT_EQ(ModeOf(dir + "/RUN"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/LOCK"), 0600u);

  CheckpointOptions shared = Options(dir_temp.path() + "/shared");
  shared.file_mode = 0640;
  {
    auto checkpoints = RunCheckpoints::Open(shared, /*writer=*/true);
    ASSERT_OK(checkpoints);
    auto written = checkpoints->Write(1, "bytes");
    ASSERT_OK(written);
    EXPECT_EQ(ModeOf(*written), 0640u);
  }
  EXPECT_EQ(ModeOf(shared.dir), 0750u);
  umask(old_umask);
}

TEST(RunCheckpointsTest, ASecondRunOnTheSameDirectoryIsRefusedNamingTheHolder) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_lock"));
  const std::string dir = dir_temp.path();
  auto first = RunCheckpoints::Open(Options(dir), /*writer=*/true);
  ASSERT_OK(first);
  auto second = RunCheckpoints::Open(Options(dir), /*writer=*/true);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ExitCodeOf(second.status()), kExitUsage);
  EXPECT_TRUE(
      absl::StrContains(second.status().message(),
                        absl::StrCat("--checkpoint_dir=", dir, " is in use by another run (", dir,
                                     "/LOCK is locked by pid ", getpid(), " on host ")))
      << second.status();
  // Ranks that do not write take no lock.
  EXPECT_OK(RunCheckpoints::Open(Options(dir), /*writer=*/false));
  // Once the first run is over, the directory is free again.
  first = absl::CancelledError("closed");
  EXPECT_OK(RunCheckpoints::Open(Options(dir), /*writer=*/true));
}

TEST(RunCheckpointsTest, AnotherRunsCheckpointsAreNeverResumedNorOverwritten) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_identity"));
  const std::string dir = dir_temp.path();
  std::string written;
  {
    auto mine = RunCheckpoints::Open(Options(dir, "model=resnet18 num_classes=10 seed=1"), true);
    ASSERT_OK(mine);
    auto path = mine->Write(5, "their checkpoint");
    ASSERT_OK(path);
    written = *path;
  }
  for (const char* resume : {"auto", "none"}) {
    CheckpointOptions other = Options(dir, "model=resnet50 num_classes=10 seed=1");
    other.resume = *ResumeFrom::Parse(resume);
    auto refused = RunCheckpoints::Open(other, /*writer=*/true);
    ASSERT_FALSE(refused.ok()) << resume;
    EXPECT_EQ(ExitCodeOf(refused.status()), kExitUsage);
    EXPECT_TRUE(absl::StrContains(
        refused.status().message(),
        absl::StrCat("--checkpoint_dir=", dir, " holds the checkpoints of another run (", dir,
                     "/RUN: 'model=resnet18 num_classes=10 seed=1'; this run: 'model=resnet50 "
                     "num_classes=10 seed=1')")))
        << refused.status();
  }
  EXPECT_EQ(*ReadWholeFile(written), "their checkpoint");
  // The same run again (a requeue) is welcome.
  EXPECT_OK(RunCheckpoints::Open(Options(dir, "model=resnet18 num_classes=10 seed=1"), true));
}

TEST(RunCheckpointsTest, ALiveWritersTemporaryIsNeverRemovedAndADeadOnesIs) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_temporaries"));
  const std::string dir = dir_temp.path();
  auto live = RunCheckpoints::Open(Options(dir), /*writer=*/true);
  ASSERT_OK(live);
  // What the live writer has in flight (the name WriteFileAtomically gives it).
  const std::string in_flight = dir + "/.ckpt-000000000009.stoker.tmp-4242-00000000deadbeef";
  std::ofstream(in_flight) << "partial";
  EXPECT_FALSE(RunCheckpoints::Open(Options(dir), /*writer=*/true).ok());
  EXPECT_TRUE(Exists(in_flight));
  // Its writer is gone (the lock went with it): the next run removes the partial file.
  live = absl::CancelledError("killed");
  EXPECT_OK(RunCheckpoints::Open(Options(dir), /*writer=*/true));
  EXPECT_FALSE(Exists(in_flight));
}

TEST(RunCheckpointsTest, SavingKeepsEveryRuleWhetherSynchronousOrAsynchronous) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_save"));
    CheckpointOptions options = Options(dir_temp.path() + "/ckpt");
    options.async = async;
    options.keep = 2;
    options.file_mode = 0640;
    {
      ASSERT_OK_AND_ASSIGN(RunCheckpoints checkpoints, RunCheckpoints::Open(options, true));
      for (int64_t step : {10, 20, 30}) {
        ASSERT_OK_AND_ASSIGN(std::string path, checkpoints.Save(step, Snapshot(step)));
        EXPECT_EQ(path, absl::StrCat(options.dir, "/", CheckpointFileName(step)));
        EXPECT_OK(checkpoints.WriteError());
      }
      EXPECT_OK(checkpoints.WaitForWrites());
      EXPECT_OK(checkpoints.WriteError());
    }
    EXPECT_EQ(Entries(options.dir), (std::vector<std::string>{"LOCK", "RUN", CheckpointFileName(20),
                                                              CheckpointFileName(30)}));
    for (int64_t step : {20, 30}) {
      const std::string path = absl::StrCat(options.dir, "/", CheckpointFileName(step));
      EXPECT_EQ(ModeOf(path), 0640u);
      ASSERT_OK_AND_ASSIGN(CheckpointReader reader, LoadCheckpoint(path));
      EXPECT_EQ(*reader.Int("step"), step);
      EXPECT_EQ(reader.bytes(), Snapshot(step).Finish());
    }
  }
}

TEST(RunCheckpointsTest, AnAsynchronousSaveReturnsAtOnceAndTheEndWaitsForItsWrite) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_in_flight"));
  CheckpointOptions options = Options(dir_temp.path());
  options.async = true;
  options.write_pause_for_testing = absl::Milliseconds(500);
  const std::string path = absl::StrCat(options.dir, "/", CheckpointFileName(5));
  {
    ASSERT_OK_AND_ASSIGN(RunCheckpoints checkpoints, RunCheckpoints::Open(options, true));
    const absl::Time start = absl::Now();
    ASSERT_OK(checkpoints.Save(5, Snapshot(5)));
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(400)) << "the step waited for the write";
    absl::SleepFor(absl::Milliseconds(100));
    // In flight: a partial temporary file, nothing under the checkpoint's name, the lock held.
    const std::vector<std::string> entries = Entries(options.dir);
    ASSERT_EQ(entries.size(), 3u) << absl::StrJoin(entries, " ");
    EXPECT_TRUE(absl::StartsWith(entries[0], ".ckpt-000000000005.stoker.tmp-")) << entries[0];
    EXPECT_FALSE(Exists(path));
    EXPECT_FALSE(RunCheckpoints::Open(options, /*writer=*/true).ok());
  }
  ASSERT_OK_AND_ASSIGN(CheckpointReader reader, LoadCheckpoint(path));
  EXPECT_EQ(*reader.Int("step"), 5);
  EXPECT_EQ(Entries(options.dir), (std::vector<std::string>{"LOCK", "RUN", CheckpointFileName(5)}));
}

TEST(RunCheckpointsTest, AFailedAsynchronousWriteIsNeverLostAndCarriesExitCode74) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_fails"));
  CheckpointOptions options = Options(dir_temp.path() + "/ckpt");
  options.async = true;
  ASSERT_OK_AND_ASSIGN(RunCheckpoints checkpoints, RunCheckpoints::Open(options, true));
  ASSERT_OK(checkpoints.Save(1, Snapshot(1)));
  ASSERT_OK(checkpoints.WaitForWrites());
  // The directory goes away under the run: the next write fails on the writer thread.
  ASSERT_EQ(rename(options.dir.c_str(), (options.dir + ".gone").c_str()), 0);
  ASSERT_OK(checkpoints.Save(2, Snapshot(2))) << "handed over: the failure comes later";
  const absl::Status waited = checkpoints.WaitForWrites();
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(absl::StrContains(waited.message(), CheckpointFileName(2))) << waited;
  EXPECT_EQ(ExitCodeOf(waited), kExitCheckpointIo);
  EXPECT_EQ(ExitCodeOf(checkpoints.WriteError()), kExitCheckpointIo);
  const absl::StatusOr<std::string> next = checkpoints.Save(3, Snapshot(3));
  EXPECT_EQ(ExitCodeOf(next.status()), kExitCheckpointIo) << next.status();
}

}  // namespace
}  // namespace stoker::trainer
