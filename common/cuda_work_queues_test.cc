#include "common/cuda_work_queues.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(CudaWorkQueuesTest, AsksForAllQueuesUnlessTheEnvironmentSetsThem) {
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  EXPECT_EQ(UseAllCudaWorkQueues(), "32");
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
  EXPECT_EQ(UseAllCudaWorkQueues(), "4");
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "4");
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "", 1);
  EXPECT_EQ(UseAllCudaWorkQueues(), "32");
}

}  // namespace
}  // namespace stoker
