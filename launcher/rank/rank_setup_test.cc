// Rank setup under mpirun -np 3 (run by //tests:run_mpi_test.sh, MPI started by
// //tests:mpi_test_main): ranks, local ranks and node numbering, by shared memory and with
// a forced node split; and the GPU choice, which needs no MPI.
#include "launcher/rank/rank_setup.h"

#include <mpi.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every rank's RankInfo fields, gathered on every rank, in rank order.
std::vector<int> GatherField(MPI_Comm world, int value) {
  int size = 0;
  MPI_Comm_size(world, &size);
  std::vector<int> all(size);
  MPI_Allgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, world);
  return all;
}

TEST(RankSetupTest, RunsAsThreeRanks) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 3) << "run this test with mpirun -np 3";
}

TEST(RankSetupTest, RanksOfOneMachineShareOneNode) {
  MPI_Comm node;
  absl::StatusOr<RankInfo> info = ComputeRankInfo(MPI_COMM_WORLD, {}, &node);
  ASSERT_TRUE(info.ok()) << info.status();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(info->rank, rank);
  EXPECT_EQ(info->world_size, 3);
  EXPECT_EQ(info->local_rank, rank);  // one machine: the local rank is the global rank
  EXPECT_EQ(info->local_size, 3);
  EXPECT_EQ(info->node_index, 0);
  EXPECT_EQ(info->node_count, 1);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  EXPECT_EQ(node_size, 3);
  MPI_Comm_free(&node);
}

TEST(RankSetupTest, ForcedSplitGroupsConsecutiveRanksIntoNodes) {
  MPI_Comm node;
  absl::StatusOr<RankInfo> info = ComputeRankInfo(MPI_COMM_WORLD, {/*ranks_per_node=*/2}, &node);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(GatherField(MPI_COMM_WORLD, info->local_rank), ElementsAre(0, 1, 0));
  EXPECT_THAT(GatherField(MPI_COMM_WORLD, info->local_size), ElementsAre(2, 2, 1));
  EXPECT_THAT(GatherField(MPI_COMM_WORLD, info->node_index), ElementsAre(0, 0, 1));
  EXPECT_THAT(GatherField(MPI_COMM_WORLD, info->node_count), ElementsAre(2, 2, 2));
  EXPECT_THAT(GatherField(MPI_COMM_WORLD, info->world_size), ElementsAre(3, 3, 3));
  // The node communicator holds exactly the node's ranks: a sum over it counts them.
  int one = 1, members = 0;
  MPI_Allreduce(&one, &members, 1, MPI_INT, MPI_SUM, node);
  EXPECT_EQ(members, info->local_size);
  MPI_Comm_free(&node);
}

TEST(RankSetupTest, OneRankPerNodeMakesEveryRankLocalRankZero) {
  MPI_Comm node;
  absl::StatusOr<RankInfo> info = ComputeRankInfo(MPI_COMM_WORLD, {/*ranks_per_node=*/1}, &node);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->local_rank, 0);
  EXPECT_EQ(info->local_size, 1);
  EXPECT_EQ(info->node_index, info->rank);
  EXPECT_EQ(info->node_count, 3);
  MPI_Comm_free(&node);
}

TEST(RankSetupTest, NegativeRanksPerNodeIsRejected) {
  MPI_Comm node = MPI_COMM_NULL;
  absl::StatusOr<RankInfo> info = ComputeRankInfo(MPI_COMM_WORLD, {/*ranks_per_node=*/-1}, &node);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("--ranks_per_node"));
}

TEST(RankSetupTest, CreateRefusesWhenMpiIsAlreadyUp) {
  int argc = 0;
  char** argv = nullptr;
  absl::StatusOr<std::unique_ptr<MpiSession>> session = MpiSession::Create(&argc, &argv);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
}

RankInfo Local(int local_rank, int local_size) {
  RankInfo info;
  info.rank = 10 + local_rank;
  info.world_size = 16;
  info.local_rank = local_rank;
  info.local_size = local_size;
  info.node_index = 1;
  info.node_count = 2;
  return info;
}

TEST(GpuForLocalRankTest, LocalRankIPicksGpuI) {
  for (int local_rank = 0; local_rank < 8; ++local_rank) {
    absl::StatusOr<int> gpu = GpuForLocalRank(Local(local_rank, 8), 8, "");
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ(*gpu, local_rank);
  }
}

TEST(GpuForLocalRankTest, FewerRanksThanGpusIsFine) {
  absl::StatusOr<int> gpu = GpuForLocalRank(Local(1, 2), 8, "");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(*gpu, 1);
}

TEST(GpuForLocalRankTest, NoGpuMeansTheCpu) {
  absl::StatusOr<int> gpu = GpuForLocalRank(Local(3, 4), 0, "");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(*gpu, -1);
}

TEST(GpuForLocalRankTest, MoreRanksThanGpusFailsNamingRankAndCounts) {
  absl::StatusOr<int> gpu = GpuForLocalRank(Local(2, 8), 1, "3");
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(gpu.status().message());
  EXPECT_THAT(message, HasSubstr("rank 12 (local rank 2 on node 1)"));
  EXPECT_THAT(message, HasSubstr("8 ranks on this node but only 1 GPU(s) visible"));
  EXPECT_THAT(message, HasSubstr("CUDA_VISIBLE_DEVICES=3"));
}

}  // namespace
}  // namespace stoker::launcher
