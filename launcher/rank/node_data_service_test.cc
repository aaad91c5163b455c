// NodeDataService under mpirun -np 4, split into two "nodes" of two ranks each (Note
// [Forced node split]): each node's local rank 0 starts the real data service, every rank
// of the node reaches it, rank 0's job id and seed count everywhere, the sockets live in the
// job's owner-only directory (one found with another mode is refused), a start-up failure
// reaches every local rank, and Stop leaves no process, socket or directory behind.
#include "launcher/rank/node_data_service.h"

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/rank_setup.h"
#include "launcher/rank/readiness.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::PathExists;
using ::stoker::launcher::testing::WaitForProcessExit;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every rank's `value`, in rank order.
template <typename T>
std::vector<T> Gather(T value) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<T> all(size);
  MPI_Allgather(&value, sizeof(T), MPI_BYTE, all.data(), sizeof(T), MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

class NodeDataServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<RankInfo> info = ComputeRankInfo(MPI_COMM_WORLD, {/*ranks_per_node=*/2}, &node_);
    ASSERT_TRUE(info.ok()) << info.status();
    rank_ = *info;
    ASSERT_EQ(rank_.world_size, 4) << "run this test with mpirun -np 4";
    options_.program = testing::Runfile("data_service/data_service");
    options_.args = {"--dataset=synthetic", "--synthetic_samples=64", "--threads=1"};
    options_.ready_timeout = absl::Seconds(30);
    options_.shutdown_grace = absl::Seconds(5);
  }
  void TearDown() override { MPI_Comm_free(&node_); }

  RankInfo rank_;
  MPI_Comm node_ = MPI_COMM_NULL;
  NodeDataServiceOptions options_;
};

TEST_F(NodeDataServiceTest, EachNodeRunsItsOwnServiceUnderRankZerosJobIdAndSeed) {
  // Every rank proposes its own id and seed; rank 0's are the ones used.
  options_.job_id = rank_.rank == 0 ? GenerateJobId() : absl::StrCat("not-rank-0-", rank_.rank);
  options_.seed = 1000 + rank_.rank;
  absl::StatusOr<std::unique_ptr<NodeDataService>> service =
      NodeDataService::Start(rank_, MPI_COMM_WORLD, node_, options_);
  ASSERT_TRUE(service.ok()) << service.status();
  NodeDataService& node_service = **service;

  EXPECT_EQ(node_service.seed(), 1000u);
  char job_id[kMaxJobIdLength + 1] = {};
  node_service.job_id().copy(job_id, kMaxJobIdLength);
  struct Id {
    char text[kMaxJobIdLength + 1];
  };
  Id mine;
  std::memcpy(mine.text, job_id, sizeof(job_id));
  for (const Id& other : Gather(mine)) EXPECT_STREQ(other.text, job_id);

  EXPECT_EQ(node_service.socket_path(), NodeSocketPath("/tmp", job_id, rank_.node_index));
  std::string error;
  EXPECT_TRUE(AcceptsConnections(node_service.socket_path(), &error)) << error;
  // Both "nodes" run on this machine: they share the job's directory, owner-only.
  const std::string job_dir = JobDirectoryPath("/tmp", job_id);
  struct stat info;
  ASSERT_EQ(lstat(job_dir.c_str(), &info), 0) << job_dir;
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(info.st_uid, geteuid());
  // Local ranks 0 own a process each, and the two nodes' processes differ.
  const std::vector<pid_t> pids = Gather(node_service.pid());
  EXPECT_GT(pids[0], 0);
  EXPECT_EQ(pids[1], -1);
  EXPECT_GT(pids[2], 0);
  EXPECT_EQ(pids[3], -1);
  EXPECT_NE(pids[0], pids[2]);

  const pid_t pid = node_service.pid();
  ASSERT_TRUE(node_service.Stop().ok());
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(PathExists(node_service.socket_path()));
  EXPECT_FALSE(PathExists(job_dir));  // the last node here removed it
  if (pid > 0) {
    EXPECT_FALSE(testing::IsProcessAlive(pid));
  }
  EXPECT_EQ(node_service.Stop().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(NodeDataServiceTest, AJobDirectoryThatIsNotOwnerOnlyIsRefusedByName) {
  // Rank 0's job id; its directory is there already, readable by everyone.
  struct Id {
    char text[kMaxJobIdLength + 1] = {};
  };
  Id id;
  if (rank_.rank == 0) GenerateJobId().copy(id.text, kMaxJobIdLength);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  options_.job_id = id.text;
  const std::string job_dir = JobDirectoryPath("/tmp", options_.job_id);
  if (rank_.rank == 0) {
    ASSERT_EQ(mkdir(job_dir.c_str(), 0700), 0);
    ASSERT_EQ(chmod(job_dir.c_str(), 0755), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  absl::StatusOr<std::unique_ptr<NodeDataService>> service =
      NodeDataService::Start(rank_, MPI_COMM_WORLD, node_, options_);
  ASSERT_EQ(service.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      std::string(service.status().message()),
      HasSubstr(absl::StrCat("job directory ", job_dir, " exists but is a directory of uid ",
                             geteuid(), " with mode 0755")));
  MPI_Barrier(MPI_COMM_WORLD);
  // Refused, not changed nor used: no socket in it.
  struct stat info;
  ASSERT_EQ(lstat(job_dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0755u);
  EXPECT_FALSE(PathExists(NodeSocketPath("/tmp", options_.job_id, rank_.node_index)));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_.rank == 0) rmdir(job_dir.c_str());
}

TEST_F(NodeDataServiceTest, DestructorWithoutStopEndsTheService) {
  pid_t pid = -1;
  std::string socket;
  {
    absl::StatusOr<std::unique_ptr<NodeDataService>> service =
        NodeDataService::Start(rank_, MPI_COMM_WORLD, node_, options_);
    ASSERT_TRUE(service.ok()) << service.status();
    pid = (*service)->pid();
    socket = (*service)->socket_path();
  }
  if (pid > 0) {
    EXPECT_TRUE(WaitForProcessExit(pid, absl::Seconds(5)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(PathExists(socket));
  EXPECT_FALSE(PathExists(socket.substr(0, socket.rfind('/'))));
}

TEST_F(NodeDataServiceTest, StopGivesUpOnALocalRankThatDoesNotComeAndStillEndsTheService) {
  options_.stop_timeout = absl::Milliseconds(500);
  pid_t pid = -1;
  {
    absl::StatusOr<std::unique_ptr<NodeDataService>> service =
        NodeDataService::Start(rank_, MPI_COMM_WORLD, node_, options_);
    ASSERT_TRUE(service.ok()) << service.status();
    pid = (*service)->pid();
    if (rank_.local_rank == 1) absl::SleepFor(absl::Seconds(2));  // late
    const absl::Status stopped = (*service)->Stop();
    if (rank_.local_rank == 0) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(stopped)) << stopped;
      EXPECT_THAT(stopped.message(), HasSubstr(absl::StrCat("the ranks of node ", rank_.node_index,
                                                            " did not all finish within 500ms")));
    } else {
      EXPECT_TRUE(stopped.ok()) << stopped;  // local rank 0 is waiting already
    }
  }
  if (pid > 0) {
    EXPECT_TRUE(WaitForProcessExit(pid, absl::Seconds(10)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(NodeDataServiceTest, StartFailureReachesEveryLocalRankWithLocalRankZerosMessage) {
  options_.program = "/bin/false";
  options_.job_id = GenerateJobId();  // rank 0's counts
  absl::StatusOr<std::unique_ptr<NodeDataService>> service =
      NodeDataService::Start(rank_, MPI_COMM_WORLD, node_, options_);
  ASSERT_EQ(service.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(service.status().message());
  EXPECT_THAT(message, HasSubstr("exited with code 1 before it accepted connections"));
  if (rank_.local_rank != 0) {
    EXPECT_THAT(message, HasSubstr(absl::StrCat("the data service of node ", rank_.node_index,
                                                " did not start (local rank 0 says:")));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_.rank == 0) {
    EXPECT_FALSE(PathExists(JobDirectoryPath("/tmp", options_.job_id)));
  }
}

TEST_F(NodeDataServiceTest, BadJobIdOfRankZeroFailsEveryRank) {
  options_.job_id = rank_.rank == 0 ? "bad.id" : "fine";
  absl::StatusOr<std::unique_ptr<NodeDataService>> service =
      NodeDataService::Start(rank_, MPI_COMM_WORLD, node_, options_);
  EXPECT_EQ(service.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(service.status().message()), HasSubstr("rank 0's job id"));
}

TEST(NodeDataServiceArgvTest, NodeDecidesSocketJobAndNodeIdAndSeedsByDefault) {
  absl::StatusOr<std::vector<std::string>> argv = BuildNodeDataServiceArgv(
      "/x/data_service", "/tmp/stoker.j/node1.sock", "j", 1, 42, {"--dataset=synthetic"});
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv,
              ElementsAre("/x/data_service", "--socket=/tmp/stoker.j/node1.sock", "--job_id=j",
                          "--node_id=1", "--data_seed=42", "--dataset=synthetic"));
}

TEST(NodeDataServiceArgvTest, ArgsMaySetTheDataSeed) {
  absl::StatusOr<std::vector<std::string>> argv =
      BuildNodeDataServiceArgv("/x/ds", "/s", "j", 0, 42, {"--data_seed=7"});
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv,
              ElementsAre("/x/ds", "--socket=/s", "--job_id=j", "--node_id=0", "--data_seed=7"));
}

TEST(NodeDataServiceArgvTest, RejectsWhatTheNodeDecidesAndBareWords) {
  for (const char* arg : {"--socket=/x", "--job_id=k", "-node_id=3", "synthetic"}) {
    absl::StatusOr<std::vector<std::string>> argv =
        BuildNodeDataServiceArgv("/x/ds", "/s", "j", 0, 42, {arg});
    EXPECT_EQ(argv.status().code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(std::string(argv.status().message()), HasSubstr("--data_service_args")) << arg;
  }
}

}  // namespace
}  // namespace stoker::launcher
