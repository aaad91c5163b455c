#include "trainer/report/throughput_meter.h"

#include <algorithm>

namespace stoker::trainer {

void ThroughputMeter::Restart(Clock::time_point now) {
  start_ = now;
  images_ = 0;
  data_wait_ = absl::ZeroDuration();
  gpu_input_wait_.reset();
}

double ThroughputMeter::Seconds(Clock::time_point now) const {
  return std::max(std::chrono::duration<double>(now - start_).count(), 1e-9);
}

double ThroughputMeter::DataWaitShare(Clock::time_point now, bool capped) const {
  const double share = absl::ToDoubleSeconds(data_wait_) / Seconds(now);
  return capped ? std::min(1.0, share) : share;
}

double ThroughputMeter::GpuInputWaitShare(Clock::time_point now) const {
  if (!gpu_input_wait_.has_value()) return -1;
  return std::min(1.0, absl::ToDoubleSeconds(*gpu_input_wait_) / Seconds(now));
}

}  // namespace stoker::trainer
