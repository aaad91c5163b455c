// ThroughputMeter: images per second and the share of time spent waiting for data (the
// host's wait, and the GPU's where the feeder measures it), over a stretch of wall time
// from which pauses (validation, checkpoints) are left out.
#ifndef STOKER_TRAINER_REPORT_THROUGHPUT_METER_H_
#define STOKER_TRAINER_REPORT_THROUGHPUT_METER_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace stoker::trainer {

// Not thread-safe; owned by the training thread.
//
//   ThroughputMeter meter;           // starts now
//   meter.AddDataWait(batch.data_wait);
//   meter.AddImages(batch_size * world_size);
//   meter.Exclude(validation_time);  // not training
//   printf("%.1f img/s", meter.ImagesPerSecond());
class ThroughputMeter {
 public:
  using Clock = std::chrono::steady_clock;

  ThroughputMeter() : start_(Clock::now()) {}

  // Starts again from zero at `now`.
  void Restart(Clock::time_point now = Clock::now());
  void AddImages(int64_t images) { images_ += images; }
  void AddDataWait(absl::Duration wait) { data_wait_ += wait; }
  void AddGpuInputWait(absl::Duration wait) {
    gpu_input_wait_ = gpu_input_wait_.value_or(absl::ZeroDuration()) + wait;
  }
  // Leaves `paused` out of the measured time.
  void Exclude(Clock::duration paused) { start_ += paused; }

  // Wall time since the start, without the excluded pauses (at least 1 ns).
  double Seconds(Clock::time_point now = Clock::now()) const;
  double ImagesPerSecond(Clock::time_point now = Clock::now()) const {
    return images_ / Seconds(now);
  }
  // Time waiting for data over the measured time; at most 1 when `capped`.
  double DataWaitShare(Clock::time_point now = Clock::now(), bool capped = false) const;
  // The GPU's wait for input over the measured time, at most 1; negative when no batch
  // since the start carried it.
  double GpuInputWaitShare(Clock::time_point now = Clock::now()) const;

 private:
  Clock::time_point start_;
  int64_t images_ = 0;
  absl::Duration data_wait_;
  std::optional<absl::Duration> gpu_input_wait_;  // none until a batch carries it
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_THROUGHPUT_METER_H_
