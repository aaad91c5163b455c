#include "trainer/comm/collective_progress_table.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

std::string UniqueName(const char* what) {
  return absl::StrCat("/stoker.tabletest-", getpid(), "-", what);
}

bool NameExists(const std::string& name) {
  struct stat info;
  return stat(absl::StrCat("/dev/shm", name).c_str(), &info) == 0;
}

TEST(CollectiveProgressTableTest, CreatedTableIsOwnerOnlyAndHasEmptySlots) {
  const std::string name = UniqueName("mode");
  auto table = CollectiveProgressTable::Create(name, 3);
  ASSERT_TRUE(table.ok()) << table.status();
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
  const std::string name = UniqueName("taken");
  auto first = CollectiveProgressTable::Create(name, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = CollectiveProgressTable::Create(name, 2);
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                absl::StrCat("progress table /dev/shm", name, " already exists")))
      << second.status();
  // The refused attempt left the first table's name alone.
  EXPECT_TRUE(NameExists(name));
}

TEST(CollectiveProgressTableTest, BadNamesAndSizesAreRejected) {
  const absl::Status no_slash = CollectiveProgressTable::Create("no-slash", 2).status();
  EXPECT_TRUE(absl::IsInvalidArgument(no_slash)) << no_slash;
  EXPECT_TRUE(absl::StrContains(no_slash.message(), "progress table")) << no_slash;
  EXPECT_TRUE(absl::StrContains(no_slash.message(), "no-slash")) << no_slash;
  EXPECT_TRUE(absl::IsInvalidArgument(CollectiveProgressTable::Create("/a/b", 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(CollectiveProgressTable::Create(UniqueName("zero"), 0).status()));
}

TEST(CollectiveProgressTableTest, AnotherProcessSeesTheSlotsItsPeersWrite) {
  const std::string name = UniqueName("shared");
  auto table = CollectiveProgressTable::Create(name, 2);
  ASSERT_TRUE(table.ok()) << table.status();
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
  const std::string name = UniqueName("count");
  auto table = CollectiveProgressTable::Create(name, 2);
  ASSERT_TRUE(table.ok()) << table.status();
  auto opened = CollectiveProgressTable::Open(name, 3);
  EXPECT_TRUE(absl::IsFailedPrecondition(opened.status())) << opened.status();
  const absl::Status absent = CollectiveProgressTable::Open(UniqueName("absent"), 2).status();
  EXPECT_TRUE(absl::IsNotFound(absent)) << absent;
  EXPECT_TRUE(absl::StrContains(absent.message(), UniqueName("absent"))) << absent;
}

TEST(CollectiveProgressTableTest, UnlinkRemovesTheNameAndKeepsTheMapping) {
  const std::string name = UniqueName("unlink");
  auto table = CollectiveProgressTable::Create(name, 2);
  ASSERT_TRUE(table.ok()) << table.status();
  auto opened = CollectiveProgressTable::Open(name, 2);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(opened->Unlink()));  // only the creator
  ASSERT_TRUE(table->Unlink().ok());
  EXPECT_FALSE(NameExists(name));
  EXPECT_TRUE(absl::IsFailedPrecondition(table->Unlink()));  // once
  StoreRelease(&table->slot(0).heartbeat_ns, 123);
  EXPECT_EQ(LoadAcquire(&opened->slot(0).heartbeat_ns), 123);
}

TEST(CollectiveProgressTableTest, TheCreatorRemovesTheNameWhenItGoes) {
  const std::string name = UniqueName("raii");
  {
    auto table = CollectiveProgressTable::Create(name, 1);
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_TRUE(NameExists(name));
    CollectiveProgressTable moved = std::move(*table);
    EXPECT_TRUE(NameExists(name));
  }
  EXPECT_FALSE(NameExists(name));
}

}  // namespace
}  // namespace stoker::trainer
