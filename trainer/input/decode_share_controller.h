// DecodeShareController: picks the share of each batch that a CUDA trainer decodes on its
// GPU (Note [Deferred samples] in data_service/image/deferred_jpeg.h) from the images per
// second it takes, measured over short windows of batches. Pure logic over the batches it
// is shown and the times it is given: no clock, no ring, no libtorch.
//
// Note [Adapting the GPU decode share]
// Decoding on the GPU relieves the data service's CPUs but costs the GPU time that the
// step would use (its JPEG engines are separate, the crop and resize kernels and the
// copies are not), so the best share depends on the model and the machine: about 0.25 for
// ResNet-18 on one H200, 0.75 for a rank that only takes batches. The throughput against
// the share has one peak, and a run should reach it in seconds, so the controller:
//  1. Ladder (no prior): measures one window at each rung 0, ladder_step, 2 ladder_step...
//     up to max_share, and stops climbing at the first rung that does not raise the best
//     rate so far by more than min_gain, or where the GPU did not wait for input (more
//     than wait_threshold of the window: more decode on a GPU that is the bottleneck
//     cannot help).
//  2. Refinement: hill-climbs from the best share measured in steps of `step`, trying each
//     unmeasured neighbour (up only where the GPU waits for input at the best share), until
//     neither neighbour pays. A prior (a share remembered for this node, dataset and model:
//     decode_share_prior.h) skips the ladder: the first window is at the prior, and
//     refinement starts there.
//  3. Holding: the best share is the cheapest one measured within min_gain of the fastest.
//     Held, it keeps measuring; every recheck_interval it tries one neighbour for one window
//     (alternating down and up, up only while the GPU waits for input) and moves only if the
//     neighbour pays against the held rate, refining from there; otherwise it returns, and
//     the interval doubles up to max_recheck_interval. The held rate is the mean of the
//     windows held so far, not one window's: one window varies by 10-15% where the data
//     service is the bottleneck (a rank that only takes batches). reprobe_windows windows
//     in a row that fall reprobe_drop below the held rate start a refinement; one slow
//     window does not.
// A window lasts at least window_batches batches and min_window. After every change the
// batches produced with the old share are not counted (each batch says which share it was
// produced with), nor settle_batches more (the ring's buffered batches drain); a gap between
// two batches longer than max_gap (validation, a checkpoint) restarts the window. If the
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
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::trainer {

struct DecodeShareControllerOptions {
  double step = 0.125;        // the finest move; every requested share is on its grid from 0
  double ladder_step = 0.25;  // the start-up ladder's rungs (a multiple of step)
  double max_share = 1.0;     // never above
  int warmup_batches = 24;    // ignored at the start (cuDNN tuning, first allocations)
  int settle_batches = 6;     // ignored after each change has reached the batches
  int window_batches = 16;    // a window has at least this many batches...
  absl::Duration min_window = absl::Milliseconds(400);  // ...and lasts at least this long
  double min_gain = 0.02;        // a move must raise images/s by more than this fraction
  double wait_threshold = 0.05;  // the GPU waits for input: a wait above this share
  double reprobe_drop = 0.10;    // held: refine again below (1 - this) of the held rate...
  int reprobe_windows = 2;       // ...for this many windows in a row
  absl::Duration recheck_interval = absl::Seconds(20);       // held: try a neighbour this often...
  absl::Duration max_recheck_interval = absl::Seconds(320);  // ...doubling up to this
  absl::Duration max_gap = absl::Seconds(2);  // a longer pause between batches restarts a window
  int follow_batches = 64;  // batches of another share than requested: the service fixes it

  // InvalidArgument naming the field at fault.
  absl::Status Validate() const;
};

// Owned by one thread (the training thread, through ShareControlledFeeder).
class DecodeShareController {
 public:
  enum class Phase {
    kLadder,          // measuring the start-up rungs
    kRefining,        // hill-climbing around the best share measured
    kSettled,         // holding the best share, watching for a fall
    kRechecking,      // held, trying a neighbour for one window
    kFixedByService,  // the batches do not follow the request: no more adapting
  };

  // One completed window.
  struct Window {
    double share = 0.0;
    int batches = 0;
    int64_t images = 0;
    absl::Duration length;
    double images_per_second = 0.0;
    double wait_share = 0.0;  // of the window's length, the GPU waited for input
    absl::Time end;
  };

  // `prior`: a share remembered as the best for this run's setting; the first windows start
  // there instead of at the ladder's 0 (snapped to the grid of options.step).
  explicit DecodeShareController(const DecodeShareControllerOptions& options,
                                 std::optional<double> prior = std::nullopt);

  // One batch the trainer took when `now` (monotonic in the caller's clock): the share it
  // was produced with, its images, and how long the GPU waited for it. Returns the share
  // to request from now on (the same as before unless this batch ended a window that
  // called for a move).
  double Observe(double batch_share, int64_t images, absl::Duration data_wait, absl::Time now);

  double requested() const { return requested_; }
  Phase phase() const { return phase_; }
  // Holding a share (also while trying a neighbour of it).
  bool settled() const { return phase_ == Phase::kSettled || phase_ == Phase::kRechecking; }
  // The share held (settled()), and the rate it is held at.
  double held() const { return held_; }
  double held_rate() const { return reference_rate_; }
  // The images per second of the last completed window (0 before the first), and the
  // share it was measured at.
  double last_rate() const { return last_window_.images_per_second; }
  double last_rate_share() const { return last_window_.share; }
  // The share the batches arrive with (the last batch's).
  double delivered() const { return delivered_; }
  // Completed windows so far, the last of them, and what it decided (one line).
  int64_t windows() const { return windows_; }
  const Window& last_window() const { return last_window_; }
  const std::string& last_decision() const { return last_decision_; }
  // When the first batch was seen (the caller's clock), and when the controller first
  // settled (nullopt before).
  absl::Time first_batch() const { return first_batch_; }
  std::optional<absl::Time> first_settled() const { return first_settled_; }
  absl::Duration recheck_interval() const { return interval_; }

 private:
  struct Measure {
    double rate = 0.0;
    double wait_share = 0.0;
  };

  int IndexOf(double share) const;
  double ShareOf(int index) const;
  bool Waits(double wait_share) const { return wait_share > options_.wait_threshold; }
  // The cheapest measured share within min_gain of the fastest measured.
  int Choice() const;
  void Move(int index, Phase phase);
  void Decide(const Window& window, absl::Time now);
  void ClimbLadder(int index, const Measure& m);
  void Refine();
  void Hold(int index);
  void AddHeldRate(double rate);
  void RestartWindow(int skip);

  const DecodeShareControllerOptions options_;
  const int max_index_;
  const int ladder_stride_;
  Phase phase_ = Phase::kLadder;
  double requested_ = 0.0;
  double delivered_ = 0.0;
  std::map<int, Measure> measured_;  // this probe's windows, by share index
  double held_ = 0.0;
  // Held: the rate a fall or a recheck is measured against, the mean of the held windows
  // (held_windows_ of them, summing to held_sum_), and the slow windows in a row not yet
  // counted in it (reprobe_windows of them start a refinement).
  double reference_rate_ = 0.0;
  double held_sum_ = 0.0;
  int held_windows_ = 0;
  std::vector<double> slow_rates_;
  Measure check_base_;          // rechecking: the held share's last window
  bool next_check_up_ = false;  // rechecks alternate down and up
  absl::Duration interval_;
  absl::Time next_check_;
  int64_t windows_ = 0;
  Window last_window_;
  std::string last_decision_;
  absl::Time first_batch_;
  std::optional<absl::Time> first_settled_;

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
