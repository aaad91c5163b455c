// NCCL collectives on the GPUs of this node (tag gpu; 2 ranks under mpirun, one GPU each).
#include "trainer/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "trainer/comm/collective_watchdog.h"

namespace stoker::trainer {
namespace {

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < size_) {
      GTEST_SKIP() << "needs " << size_ << " GPUs";
    }
    cudaSetDevice(rank_);
    auto comm = NcclCommunicator::Create(MPI_COMM_WORLD, rank_);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }
  at::TensorOptions On(at::ScalarType t) {
    return at::TensorOptions().device(at::kCUDA, rank_).dtype(t);
  }

  int rank_ = 0, size_ = 1;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclCommunicatorTest, AllReduceSumsAndAveragesAcrossGpus) {
  const int64_t n = 10'000'019;  // odd size, several MB
  at::Tensor x = at::arange(n, On(at::kFloat)).mul_(rank_ + 1);
  ASSERT_TRUE(comm_->AllReduce(x.data_ptr(), n, ElementType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm_->Synchronize().ok());
  const double factor = size_ * (size_ + 1) / 2.0;
  at::Tensor expected = at::arange(n, On(at::kFloat)).mul_(factor);
  EXPECT_TRUE(at::allclose(x, expected));

  at::Tensor y = at::full({4096}, static_cast<float>(rank_), On(at::kBFloat16));
  ASSERT_TRUE(
      comm_->AllReduce(y.data_ptr(), 4096, ElementType::kBFloat16, ReduceOp::kAverage).ok());
  ASSERT_TRUE(comm_->Synchronize().ok());
  EXPECT_NEAR(y.to(at::kFloat).mean().item<float>(), (size_ - 1) / 2.0, 1e-3);
}

TEST_F(NcclCommunicatorTest, BroadcastCopiesRootBytes) {
  at::Tensor x = at::full({1000}, rank_ == 0 ? 42 : -1, On(at::kLong));
  ASSERT_TRUE(comm_->Broadcast(x.data_ptr(), x.nbytes(), 0).ok());
  EXPECT_EQ(x.sum().item<int64_t>(), 42 * 1000);
}

TEST_F(NcclCommunicatorTest, TheLedgerCompletesOperationsOnceTheirWorkHasFinished) {
  at::Tensor x = at::ones({1 << 20}, On(at::kFloat));
  ASSERT_TRUE(
      comm_->AllReduce(x.data_ptr(), x.numel(), ElementType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_TRUE(
      comm_->AllReduce(x.data_ptr(), x.numel(), ElementType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_EQ(comm_->ledger()->Read().issued, 2u);
  ASSERT_EQ(cudaStreamSynchronize(comm_->stream()), cudaSuccess);
  ASSERT_TRUE(comm_->PollCompletions().ok());
  const CollectiveLedger::Snapshot done = comm_->ledger()->Read();
  EXPECT_EQ(done.completed, 2u);
  EXPECT_EQ(done.pending, 0u);
  EXPECT_EQ(done.completed_kind, CollectiveKind::kAllReduce);
}

// An allreduce captured into a CUDA graph is recorded in the ledger and completed at once
// (nothing ran); each replay reduces the inputs of that moment, and WatchCurrentStream
// gives the replay a ledger entry that completes with it. Runs on any number of ranks.
TEST_F(NcclCommunicatorTest, AnAllReduceCapturedInACudaGraphRunsAtEachReplayAndIsWatched) {
  c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, rank_));
  at::Tensor input = at::zeros({4096}, On(at::kFloat));
  at::Tensor x = at::zeros({4096}, On(at::kFloat));
  ASSERT_TRUE(
      comm_->AllReduce(x.data_ptr(), x.numel(), ElementType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm_->Synchronize().ok());
  const uint64_t before = comm_->ledger()->Read().issued;
  at::cuda::CUDAGraph graph;
  graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  x.copy_(input);
  ASSERT_TRUE(
      comm_->AllReduce(x.data_ptr(), x.numel(), ElementType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm_->Synchronize().ok());
  graph.capture_end();
  const CollectiveLedger::Snapshot captured = comm_->ledger()->Read();
  EXPECT_EQ(captured.issued, before + 1);
  EXPECT_EQ(captured.completed, captured.issued) << "a captured operation is not waited for";
  const double ranks_sum = size_ * (size_ + 1) / 2.0;
  for (int replay = 1; replay <= 3; ++replay) {
    input.fill_(static_cast<float>(replay * (rank_ + 1)));
    graph.replay();
    ASSERT_TRUE(comm_->WatchCurrentStream().ok());
    EXPECT_TRUE(at::equal(x, at::full({4096}, replay * ranks_sum, On(at::kFloat))))
        << "replay " << replay;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(comm_->PollCompletions().ok());
  const CollectiveLedger::Snapshot done = comm_->ledger()->Read();
  EXPECT_EQ(done.issued, before + 4);
  EXPECT_EQ(done.completed, done.issued);
  std::printf(
      "[ graphs ] NCCL over %d rank(s): an allreduce captured once, replayed 3 times, "
      "ledger %llu issued / %llu completed\n",
      size_, static_cast<unsigned long long>(done.issued),
      static_cast<unsigned long long>(done.completed));
  c10::cuda::setCurrentCUDAStream(c10::cuda::getDefaultCUDAStream(rank_));
}

// Rank 1 never joins the second allreduce: rank 0's watchdog aborts the communicator, which
// ends the kernel waiting on the GPU well before the process deadline. (The first allreduce
// sets the connections up, as the model broadcast does in training: an abort while NCCL
// still waits for a peer to connect can hang, which only the process deadline ends.)
TEST_F(NcclCommunicatorTest, TheWatchdogAbortsAnAllReduceThatAPeerNeverJoins) {
  at::Tensor warm = at::ones({1024}, On(at::kFloat));
  ASSERT_TRUE(
      comm_->AllReduce(warm.data_ptr(), warm.numel(), ElementType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_EQ(cudaStreamSynchronize(comm_->stream()), cudaSuccess);
  struct Exit {
    std::atomic<int> code{-1};
  };
  auto exit = std::make_shared<Exit>();
  CollectiveWatchdogOptions options;
  options.timeout = absl::Seconds(1);
  options.abort_grace = absl::Seconds(60);
  options.poll_interval = absl::Milliseconds(50);
  auto watchdog =
      CollectiveWatchdog::Start(options, WatchedRank{rank_, size_, rank_, 0}, {comm_.get()},
                                nullptr, [exit](int code) { exit->code = code; });
  ASSERT_TRUE(watchdog.ok()) << watchdog.status();
  if (rank_ == 0) {
    at::Tensor x = at::ones({1024}, On(at::kFloat));
    const absl::Time start = absl::Now();
    ASSERT_TRUE(
        comm_->AllReduce(x.data_ptr(), x.numel(), ElementType::kFloat32, ReduceOp::kSum).ok());
    cudaStreamSynchronize(comm_->stream());  // returns once the abort ended the kernel
    const absl::Duration waited = absl::Now() - start;
    EXPECT_GE(waited, absl::Seconds(1));
    EXPECT_LT(waited, absl::Seconds(30));
    EXPECT_TRUE((*watchdog)->fired());
    EXPECT_EQ(exit->code.load(), -1)
        << "the process deadline fired: the abort did not end the wait";
    EXPECT_TRUE(absl::IsAborted(
        comm_->AllReduce(x.data_ptr(), x.numel(), ElementType::kFloat32, ReduceOp::kSum)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  watchdog->reset();
  comm_->Abort();  // rank 1's peer is gone: no orderly destroy
  comm_.reset();
}

}  // namespace
}  // namespace stoker::trainer
