// DecodeShareController: picks the share of each batch that a CUDA trainer decodes on its
// GPU (Note [Deferred samples] in data_service/image/deferred_jpeg.h) by hill-climbing on
// the images per second it trains, measured over windows of batches. Pure logic over the
// batches it is shown and the times it is given: no clock, no ring, no libtorch.
//
// Note [Adapting the GPU decode share]
// Decoding on the GPU relieves the data service's CPUs but costs the GPU time that the
// step would use (its JPEG engines are separate, the crop and resize kernels and the
// copies are not), so the best share depends on the model and the machine. The
// controller starts at 0 and, while the trainer waits for data (the wait it is given is more
// than wait_threshold of the window: the GPU's wait for input where the feeder measures it,
// ShareControlledFeeder) and each step up of `step` raises the throughput by more than
// min_gain, keeps stepping up; a step that does not pay is taken back, and the share
// settles there. It never raises the share in a window where the trainer did not wait for
// data. Settled, it keeps measuring, and only a window whose throughput falls below
// (1 - reprobe_drop) of the settled figure starts a new probe from the current share:
// up if the trainer waits for data, else (or if up does not pay) down. After every change
// it ignores the batches produced with the old share (each batch says which share it was
// produced with) and then settle_batches more (the pipeline refills), and a gap between two
// batches longer than max_gap (validation, a checkpoint) restarts the window. If the
// batches never take the requested share (the data service fixes it:
// --gpu_decode_share=F there), the controller stops adapting and says so.
//
//   DecodeShareController controller(DecodeShareControllerOptions{});
//   per batch: double want = controller.Observe(batch.gpu_decode_share, batch.count,
//                                               batch.data_wait, absl::Now());
//              if (want != requested) ring->RequestGpuDecodeShare(want);
#ifndef STOKER_TRAINER_INPUT_DECODE_SHARE_CONTROLLER_H_
#define STOKER_TRAINER_INPUT_DECODE_SHARE_CONTROLLER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::trainer {

struct DecodeShareControllerOptions {
  double step = 0.125;      // one move of the share
  double max_share = 1.0;   // never above
  int warmup_batches = 24;  // ignored at the start (cuDNN tuning, first allocations)
  int settle_batches = 8;   // ignored after each change has reached the batches
  int window_batches = 32;  // a window has at least this many batches...
  absl::Duration min_window = absl::Seconds(1);  // ...and lasts at least this long
  double min_gain = 0.02;        // a move must raise images/s by more than this fraction
  double wait_threshold = 0.05;  // the trainer waits for data: data wait above this share
  double reprobe_drop = 0.10;    // settled: probe again below (1 - this) of the settled rate
  absl::Duration max_gap = absl::Seconds(2);  // a longer pause between batches restarts a window
  int follow_batches = 64;  // batches of another share than requested: the service fixes it

  // InvalidArgument naming the field at fault.
  absl::Status Validate() const;
};

// Owned by one thread (the training thread, through ShareControlledFeeder).
class DecodeShareController {
 public:
  enum class Phase {
    kMeasuringBase,   // the current share's throughput, before a move
    kTryingUp,        // one step up, measuring whether it pays
    kTryingDown,      // one step down, measuring whether it pays
    kSettled,         // watching for a clear drop
    kFixedByService,  // the batches do not follow the request: no more adapting
  };

  explicit DecodeShareController(const DecodeShareControllerOptions& options,
                                 double initial_share = 0.0);

  // One batch the trainer took when `now` (monotonic in the caller's clock): the share it
  // was produced with, its images, and how long the trainer waited for it. Returns the
  // share to request from now on (the same as before unless this batch ended a window
  // that called for a move).
  double Observe(double batch_share, int64_t images, absl::Duration data_wait, absl::Time now);

  double requested() const { return requested_; }
  Phase phase() const { return phase_; }
  bool settled() const { return phase_ == Phase::kSettled; }
  // The images per second of the last completed window (0 before the first), and the
  // share it was measured at.
  double last_rate() const { return last_rate_; }
  double last_rate_share() const { return last_rate_share_; }
  // The share the batches arrive with (the last batch's).
  double delivered() const { return delivered_; }

 private:
  void Move(double share, Phase phase);
  void Settle(double share, double rate);
  void Decide(double rate, double wait_share);
  void RestartWindow(int skip);

  const DecodeShareControllerOptions options_;
  Phase phase_ = Phase::kMeasuringBase;
  double requested_ = 0.0;
  double delivered_ = 0.0;
  double base_share_ = 0.0;  // the best share known in this probe, and its rate
  double base_rate_ = 0.0;
  double reference_rate_ = 0.0;  // settled: the rate a drop is measured against
  bool reprobing_ = false;       // this probe started from a drop, not from the start
  bool moved_ = false;           // this probe has made a move that paid
  double last_rate_ = 0.0;
  double last_rate_share_ = 0.0;

  // The current window.
  int skip_ = 0;              // batches of the requested share still to ignore
  int mismatched_ = 0;        // consecutive batches of another share than requested
  bool window_open_ = false;  // window_start_ is set
  absl::Time window_start_;
  absl::Time last_batch_;
  bool seen_batch_ = false;
  int window_count_ = 0;
  int64_t window_images_ = 0;
  absl::Duration window_wait_;
};

const char* DecodeSharePhaseName(DecodeShareController::Phase phase);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DECODE_SHARE_CONTROLLER_H_
