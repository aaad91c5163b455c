// BindRankToGpu on this machine: --device=cpu binds nothing; --device=cuda without a
// visible GPU (or without CUDA in the build) is refused naming the flag.
#include "trainer/gpu_binding.h"

#include <string>

#include "gtest/gtest.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stoker::trainer {
namespace {

int VisibleGpus() {
#ifdef STOKER_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  return count;
#else
  return 0;
#endif
}

launcher::RankInfo OneRank() {
  launcher::RankInfo rank;
  rank.rank = 0;
  rank.world_size = 1;
  rank.local_rank = 0;
  rank.local_size = 1;
  return rank;
}

TEST(GpuBindingTest, TheCpuIsNeverBound) {
  absl::StatusOr<bool> bound = BindRankToGpu(DeviceChoice::kCpu, OneRank());
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_FALSE(*bound);
}

TEST(GpuBindingTest, WithoutAGpuAutoTrainsOnTheCpuAndCudaIsRefused) {
  if (VisibleGpus() > 0) GTEST_SKIP() << "needs a machine without a visible GPU";
  absl::StatusOr<bool> automatic = BindRankToGpu(DeviceChoice::kAuto, OneRank());
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_FALSE(*automatic);
  absl::StatusOr<bool> cuda = BindRankToGpu(DeviceChoice::kCuda, OneRank());
  ASSERT_FALSE(cuda.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(cuda.status())) << cuda.status();
  EXPECT_NE(std::string(cuda.status().message()).find("--device=cuda"), std::string::npos);
}

}  // namespace
}  // namespace stoker::trainer
