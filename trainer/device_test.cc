// Tests that --precision=fp8 is refused where it cannot run: on the CPU and on GPUs
// without FP8 tensor cores, naming the flag (and the GPU's compute capability).
#include "trainer/device.h"

#include <string>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(CheckPrecisionSupportedTest, Fp8IsRefusedOnTheCpuNamingTheFlag) {
  DeviceOptions options;
  options.precision = Precision::kFp8;
  RunContext cpu;
  cpu.use_cuda = false;
  const absl::Status status = CheckPrecisionSupported(options, cpu);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(std::string(status.message()).find("--precision=fp8"), std::string::npos) << status;
  EXPECT_NE(std::string(status.message()).find("CPU"), std::string::npos) << status;
}

TEST(CheckPrecisionSupportedTest, OtherPrecisionsRunOnTheCpu) {
  RunContext cpu;
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16, Precision::kFloat32}) {
    DeviceOptions options;
    options.precision = p;
    EXPECT_TRUE(CheckPrecisionSupported(options, cpu).ok());
  }
}

TEST(CheckPrecisionSupportedTest, Fp8NeedsComputeCapability89OrNewer) {
  const absl::Status ampere = CheckFp8ComputeCapability(3, 8, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(ampere)) << ampere;
  for (const char* part : {"--precision=fp8", "GPU 3", "compute capability 8.0"}) {
    EXPECT_NE(std::string(ampere.message()).find(part), std::string::npos)
        << "expected \"" << part << "\" in: " << ampere.message();
  }
  EXPECT_FALSE(CheckFp8ComputeCapability(0, 7, 5).ok());
  EXPECT_FALSE(CheckFp8ComputeCapability(0, 8, 6).ok());
  EXPECT_TRUE(CheckFp8ComputeCapability(0, 8, 9).ok());   // Ada
  EXPECT_TRUE(CheckFp8ComputeCapability(0, 9, 0).ok());   // Hopper
  EXPECT_TRUE(CheckFp8ComputeCapability(0, 10, 0).ok());  // Blackwell
}

TEST(InputDtypeTest, Fp8RunsUnderBf16Autocast) {
  DeviceOptions options;
  options.precision = Precision::kFp8;
  RunContext gpu;
  gpu.use_cuda = true;
  EXPECT_EQ(InputDtype(options, gpu), at::kBFloat16);
  EXPECT_TRUE(UsesAutocast(options, gpu));
}

}  // namespace
}  // namespace stoker::trainer
