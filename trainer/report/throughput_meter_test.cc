#include "trainer/report/throughput_meter.h"

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using Clock = ThroughputMeter::Clock;

TEST(ThroughputMeterTest, SharesOfTheHostsAndTheGpusWaits) {
  ThroughputMeter meter;
  const Clock::time_point start = Clock::now();
  meter.Restart(start);
  const Clock::time_point now = start + std::chrono::seconds(10);
  meter.AddImages(5000);
  meter.AddDataWait(absl::Seconds(8));
  EXPECT_DOUBLE_EQ(meter.ImagesPerSecond(now), 500.0);
  EXPECT_DOUBLE_EQ(meter.DataWaitShare(now), 0.8);
  EXPECT_LT(meter.GpuInputWaitShare(now), 0) << "no batch carried the GPU's wait";
  meter.AddGpuInputWait(absl::ZeroDuration());
  EXPECT_DOUBLE_EQ(meter.GpuInputWaitShare(now), 0.0);
  meter.AddGpuInputWait(absl::Seconds(1));
  EXPECT_DOUBLE_EQ(meter.GpuInputWaitShare(now), 0.1);
  meter.AddGpuInputWait(absl::Seconds(20));
  EXPECT_DOUBLE_EQ(meter.GpuInputWaitShare(now), 1.0) << "capped";
  // Paused time is left out; a restart forgets both waits.
  meter.Exclude(std::chrono::seconds(5));
  EXPECT_DOUBLE_EQ(meter.DataWaitShare(now), 1.6);
  meter.Restart(now);
  EXPECT_DOUBLE_EQ(meter.DataWaitShare(now + std::chrono::seconds(1)), 0.0);
  EXPECT_LT(meter.GpuInputWaitShare(now + std::chrono::seconds(1)), 0);
}

}  // namespace
}  // namespace stoker::trainer
