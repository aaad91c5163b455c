// Runs as 3 MPI ranks on one host (one node): the node's progress table is shared by every
// rank and leaves no name behind; a rank that is late for a collective makes the others'
// watchdogs fire, and not its own.
#include "trainer/comm/node_progress_table.h"

#include <mpi.h>
#include <sys/stat.h>

#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/comm/collective_watchdog.h"
#include "trainer/comm/mpi_communicator.h"

namespace stoker::trainer {
namespace {

NodePlace OneNode() {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return NodePlace{rank, size, 0};
}

// Each test runs on every rank of MPI_COMM_WORLD, with a control communicator of its own.
class NodeProgressTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK_AND_ASSIGN(control_, MpiCommunicator::Create(MPI_COMM_WORLD)); }

  std::unique_ptr<MpiCommunicator> control_;
  const NodePlace place_ = OneNode();
};

TEST_F(NodeProgressTableTest, EveryLocalRankMapsTheSameTableAndNoNameIsLeft) {
  auto table = ShareNodeProgressTable(*control_, place_);
  ASSERT_OK(table);
  struct stat info;
  EXPECT_NE(stat(("/dev/shm" + table->name()).c_str(), &info), 0) << table->name() << " was left";
  StoreRelease(&table->slot(place_.local_rank).rank, 100 + place_.local_rank);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < place_.local_size; ++i) EXPECT_EQ(LoadAcquire(&table->slot(i).rank), 100 + i);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(NodeProgressTableTest, TheNameCarriesRankZerosJobIdSoThatSweepsFindIt) {
  // Only rank 0's job id counts.
  auto table = ShareNodeProgressTable(*control_, place_, place_.local_rank == 0 ? "job-7" : "x");
  ASSERT_OK(table);
  EXPECT_EQ(table->name().rfind("/stoker.job-7.collectives.run-", 0), 0u) << table->name();
  EXPECT_EQ(NodeProgressTableName("job-7", "t", 2), "/stoker.job-7.collectives.t.node2");
  EXPECT_EQ(NodeProgressTableName("", "t", 2), "/stoker.t.collectives.node2");
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(NodeProgressTableTest, TheRanksWaitingForALateRankFireAndItDoesNot) {
  auto table = ShareNodeProgressTable(*control_, place_);
  ASSERT_OK(table);

  struct Exit {
    std::atomic<int> code{-1};
  };
  auto exit = std::make_shared<Exit>();
  CollectiveWatchdogOptions options;
  options.timeout = absl::Milliseconds(700);
  options.abort_grace = absl::ZeroDuration();
  options.poll_interval = absl::Milliseconds(20);
  auto watchdog = CollectiveWatchdog::Start(
      options, WatchedRank{place_.local_rank, place_.local_size, place_.local_rank, 0},
      {control_.get()}, &*table, [exit](int code) { exit->code = code; });
  ASSERT_OK(watchdog);

  if (place_.local_rank == 1) absl::SleepFor(absl::Seconds(2));  // late for the allreduce
  int64_t value = 1;
  ASSERT_OK(control_->AllReduce(&value, 1, ElementType::kInt64, ReduceOp::kSum));
  EXPECT_EQ(value, place_.local_size);
  if (place_.local_rank == 1) {
    EXPECT_FALSE((*watchdog)->fired());
    EXPECT_EQ(exit->code.load(), -1);
  } else {
    EXPECT_TRUE((*watchdog)->fired());
    EXPECT_EQ(exit->code.load(), 1);
  }
  watchdog->reset();
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace stoker::trainer
