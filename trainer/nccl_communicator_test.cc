// NCCL collectives on the GPUs of this node (tag gpu; 2 ranks under mpirun, one GPU each).
#include "trainer/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include "gtest/gtest.h"

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
  at::TensorOptions On(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA, rank_).dtype(t); }

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
  ASSERT_TRUE(comm_->AllReduce(y.data_ptr(), 4096, ElementType::kBFloat16, ReduceOp::kAverage).ok());
  ASSERT_TRUE(comm_->Synchronize().ok());
  EXPECT_NEAR(y.to(at::kFloat).mean().item<float>(), (size_ - 1) / 2.0, 1e-3);
}

TEST_F(NcclCommunicatorTest, BroadcastCopiesRootBytes) {
  at::Tensor x = at::full({1000}, rank_ == 0 ? 42 : -1, On(at::kLong));
  ASSERT_TRUE(comm_->Broadcast(x.data_ptr(), x.nbytes(), 0).ok());
  EXPECT_EQ(x.sum().item<int64_t>(), 42 * 1000);
}

}  // namespace
}  // namespace stoker::trainer
