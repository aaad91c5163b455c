// DecodeShareGauge: the GPU decode share a rank's training ring uses, as its input side
// (share_controlled_feeder.h) sets it, for whoever shows it (the run's reporter reads it).
// Free of libtorch.
#ifndef STOKER_TRAINER_INPUT_DECODE_SHARE_GAUGE_H_
#define STOKER_TRAINER_INPUT_DECODE_SHARE_GAUGE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stoker::trainer {

// How the share came about.
enum class DecodeShareMode {
  kUnset,     // no ring of this rank reports one (synthetic input, or not opened yet)
  kOff,       // 0: the CPU, or --gpu_decode_share=0
  kFixed,     // the trainer's --gpu_decode_share=F, or auto under --deterministic
  kAdaptive,  // auto on a GPU: DecodeShareController
  kService,   // the data service's own --gpu_decode_share=F, whatever the trainer asks
};

const char* DecodeShareModeName(DecodeShareMode mode);

// Thread-safe. One per run: its input side writes it, its reporter reads it.
class DecodeShareGauge {
 public:
  struct Reading {
    DecodeShareMode mode = DecodeShareMode::kUnset;
    double share = 0.0;    // the share of the last batch trained
    bool settled = false;  // kAdaptive: the controller has settled on `share`
  };

  void Set(const Reading& reading) {
    absl::MutexLock lock(&mu_);
    reading_ = reading;
  }
  Reading Read() const {
    absl::MutexLock lock(&mu_);
    return reading_;
  }

 private:
  mutable absl::Mutex mu_;
  Reading reading_ ABSL_GUARDED_BY(mu_);
};

inline const char* DecodeShareModeName(DecodeShareMode mode) {
  switch (mode) {
    case DecodeShareMode::kUnset:
      return "unset";
    case DecodeShareMode::kOff:
      return "off";
    case DecodeShareMode::kFixed:
      return "fixed";
    case DecodeShareMode::kAdaptive:
      return "adaptive";
    case DecodeShareMode::kService:
      return "data service";
  }
  return "?";
}

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DECODE_SHARE_GAUGE_H_
