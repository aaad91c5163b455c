#include "trainer/report/throughput_meter.h"

#include <algorithm>

namespace stoker::trainer {

void ThroughputMeter::Restart(Clock::time_point now) {
  start_ = now;
  images_ = 0;
  data_wait_ = absl::ZeroDuration();
}

double ThroughputMeter::Seconds(Clock::time_point now) const {
  return std::max(std::chrono::duration<double>(now - start_).count(), 1e-9);
}

double ThroughputMeter::DataWaitShare(Clock::time_point now, bool capped) const {
  const double share = absl::ToDoubleSeconds(data_wait_) / Seconds(now);
  return capped ? std::min(1.0, share) : share;
}

}  // namespace stoker::trainer
