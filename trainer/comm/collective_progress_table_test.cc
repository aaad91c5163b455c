#include "trainer/comm/collective_progress_table.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/unique_name.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::UniqueName;
using ::testing::HasSubstr;

bool NameExists(const std::string& name) {
  struct stat info;
  return stat(absl::StrCat("/dev/shm", name).c_str(), &info) == 0;
}

TEST(CollectiveProgressTableTest, CreatedTableIsOwnerOnlyAndHasEmptySlots) {
  const std::string name = UniqueName("/stoker.tabletest.mode");
  auto table = CollectiveProgressTable::Create(name, 3);
  ASSERT_OK(table);
  struct stat info;
  ASSERT_EQ(stat(absl::StrCat("/dev/shm", name).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600);
  EXPECT_EQ(table->local_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(LoadAcquire(&table->slot(i).rank), -1);
    EXPECT_EQ(LoadAcquire(&table->slot(i).channels[0].completed), 0u);
  }
}

TEST(CollectiveProgressTableTest, ATakenNameIsNotReused) {
  const std::string name = UniqueName("/stoker.tabletest.taken");
  auto first = CollectiveProgressTable::Create(name, 2);
  ASSERT_OK(first);
  auto second = CollectiveProgressTable::Create(name, 2);
  EXPECT_THAT(
      second,
      StatusIs(absl::StatusCode::kAlreadyExists,
               HasSubstr(absl::StrCat("progress table /dev/shm", name, " already exists"))));
  // The refused attempt left the first table's name alone.
  EXPECT_TRUE(NameExists(name));
}

TEST(CollectiveProgressTableTest, BadNamesAndSizesAreRejected) {
  const absl::Status no_slash = CollectiveProgressTable::Create("no-slash", 2).status();
  EXPECT_THAT(no_slash,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("progress table"), HasSubstr("no-slash"))));
  EXPECT_THAT(CollectiveProgressTable::Create("/a/b", 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CollectiveProgressTable::Create(UniqueName("/stoker.tabletest.zero"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CollectiveProgressTableTest, AnotherProcessSeesTheSlotsItsPeersWrite) {
  const std::string name = UniqueName("/stoker.tabletest.shared");
  auto table = CollectiveProgressTable::Create(name, 2);
  ASSERT_OK(table);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto mine = CollectiveProgressTable::Open(name, 2);
    if (!mine.ok()) _exit(2);
    StoreRelease(&mine->slot(1).pid, getpid());
    StoreRelease(&mine->slot(1).channels[1].completed, 41);
    StoreRelease(&mine->slot(1).rank, 7);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(LoadAcquire(&table->slot(1).rank), 7);
  EXPECT_EQ(LoadAcquire(&table->slot(1).pid), child);
  EXPECT_EQ(LoadAcquire(&table->slot(1).channels[1].completed), 41u);
}

TEST(CollectiveProgressTableTest, OpenRejectsAnotherRankCount) {
  const std::string name = UniqueName("/stoker.tabletest.count");
  auto table = CollectiveProgressTable::Create(name, 2);
  ASSERT_OK(table);
  auto opened = CollectiveProgressTable::Open(name, 3);
  EXPECT_THAT(opened, StatusIs(absl::StatusCode::kFailedPrecondition));
  const std::string absent_name = UniqueName("/stoker.tabletest.absent");
  const absl::Status absent = CollectiveProgressTable::Open(absent_name, 2).status();
  EXPECT_THAT(absent, StatusIs(absl::StatusCode::kNotFound, HasSubstr(absent_name)));
}

TEST(CollectiveProgressTableTest, UnlinkRemovesTheNameAndKeepsTheMapping) {
  const std::string name = UniqueName("/stoker.tabletest.unlink");
  auto table = CollectiveProgressTable::Create(name, 2);
  ASSERT_OK(table);
  auto opened = CollectiveProgressTable::Open(name, 2);
  ASSERT_OK(opened);
  EXPECT_THAT(opened->Unlink(),
              StatusIs(absl::StatusCode::kFailedPrecondition));  // only the creator
  ASSERT_OK(table->Unlink());
  EXPECT_FALSE(NameExists(name));
  EXPECT_THAT(table->Unlink(), StatusIs(absl::StatusCode::kFailedPrecondition));  // once
  StoreRelease(&table->slot(0).heartbeat_ns, 123);
  EXPECT_EQ(LoadAcquire(&opened->slot(0).heartbeat_ns), 123);
}

TEST(CollectiveProgressTableTest, TheCreatorRemovesTheNameWhenItGoes) {
  const std::string name = UniqueName("/stoker.tabletest.raii");
  {
    auto table = CollectiveProgressTable::Create(name, 1);
    ASSERT_OK(table);
    EXPECT_TRUE(NameExists(name));
    CollectiveProgressTable moved = std::move(*table);
    EXPECT_TRUE(NameExists(name));
  }
  EXPECT_FALSE(NameExists(name));
}

}  // namespace
}  // namespace stoker::trainer
