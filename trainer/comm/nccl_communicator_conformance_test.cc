// NcclCommunicator passes the Communicator conformance suite (tag gpu; 2 ranks under
// mpirun, one GPU each). Each rank prints the GPU it ran on.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/comm/communicator_conformance.h"
#include "trainer/comm/nccl_communicator.h"

namespace stoker::trainer {
namespace {

// This process's rank of MPI_COMM_WORLD on GPU `rank`, over device memory. The copies
// run on the legacy default stream, the current stream that the communicator orders its
// operations after and that Synchronize() makes wait for them.
class NcclTarget final : public CommunicatorConformanceTarget {
 public:
  NcclTarget() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (cudaGetDeviceCount(&devices_) != cudaSuccess) devices_ = 0;
  }
  std::string MissingHardware() const override {
    return devices_ < size_ ? absl::StrCat("needs ", size_, " GPUs, has ", devices_) : "";
  }
  void RunOnEveryRank(const std::function<void(Communicator&)>& body) override {
    ASSERT_EQ(cudaSetDevice(rank_), cudaSuccess);
    auto comm = NcclCommunicator::Create(MPI_COMM_WORLD, rank_);
    ASSERT_TRUE(comm.ok()) << comm.status();
    body(**comm);
  }
  bool Supports(ElementType, ReduceOp) const override { return true; }
  bool can_abort() const override { return true; }
  void* Allocate(size_t bytes) override {
    void* buffer = nullptr;
    EXPECT_EQ(cudaMalloc(&buffer, bytes == 0 ? 1 : bytes), cudaSuccess);
    return buffer;
  }
  void Free(void* buffer) override { cudaFree(buffer); }
  void CopyIn(void* buffer, const void* host, size_t bytes) override {
    EXPECT_EQ(cudaMemcpy(buffer, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void CopyOut(void* host, const void* buffer, size_t bytes) override {
    EXPECT_EQ(cudaMemcpy(host, buffer, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  int devices_ = 0;
};

// Says on which GPU each rank runs, so that the log shows that the suite ran on GPUs.
class DeviceReport final : public ::testing::Environment {
 public:
  void SetUp() override {
    int rank = 0, size = 1, devices = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || rank >= devices ||
        cudaGetDeviceProperties(&prop, rank) != cudaSuccess) {
      std::printf("[ nccl     ] rank %d of %d: no GPU %d (%d visible)\n", rank, size, rank,
                  devices);
    } else {
      std::printf("[ nccl     ] rank %d of %d: GPU %d: %s (sm_%d%d, %zu MiB)\n", rank, size, rank,
                  prop.name, prop.major, prop.minor, prop.totalGlobalMem >> 20);
    }
    std::fflush(stdout);
  }
};

::testing::Environment* const kDeviceReport = ::testing::AddGlobalTestEnvironment(new DeviceReport);

INSTANTIATE_TEST_SUITE_P(
    Nccl, CommunicatorConformanceTest,
    (::stoker::testing::OnlyTarget<CommunicatorConformanceTarget, NcclTarget>("OneGpuPerRank")),
    CommunicatorConformanceParamName);

}  // namespace
}  // namespace stoker::trainer
