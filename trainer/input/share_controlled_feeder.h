// ShareControlledFeeder: a BatchFeeder around a training ring's feeder that decides the
// GPU decode share the ring is asked for (Note [Adapting the GPU decode share] in
// decode_share_controller.h) and reports the share the batches arrive with.
#ifndef STOKER_TRAINER_INPUT_SHARE_CONTROLLED_FEEDER_H_
#define STOKER_TRAINER_INPUT_SHARE_CONTROLLED_FEEDER_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "trainer/input/batch_feeder.h"
#include "trainer/input/decode_share_controller.h"
#include "trainer/input/decode_share_gauge.h"
#include "trainer/input/input_options.h"

namespace stoker::trainer {

// Note [The share's trajectory]
// With log_windows, rank 0 logs one line per window the controller measures ("GPU decode
// share window N: t=T s images=I share=S rate=R images/s ..."): T is the window's end in
// seconds since the first batch, I the images taken from the first batch up to it. At the
// end it logs the images and seconds from the first batch to the last ("GPU decode share
// trajectory: ..."). From these, the throughput of the rest of the run after each window is
// (I_end - I) / (T_end - T), and so the time after which a run stays within a margin of a
// fixed share's throughput (tools/gpu_checks.sh, decode_share_converges_*).
struct ShareControl {
  // The ring's plan: the share already requested when it connected, and whether to adapt.
  GpuDecodeSharePlan plan;
  // Asks the ring for a share from its next batch on (RingClient::RequestGpuDecodeShare).
  // Called on the training thread.
  std::function<void(double)> request;
  DecodeShareGauge* gauge = nullptr;  // where the share in use goes; may be null; outlives
  bool log_changes = false;           // log each change (rank 0)
  bool log_windows = false;           // log each window measured (--log_decode_share_windows)
  // Adaptive: called on the training thread when the controller holds a share it did not
  // hold before, with that share and its images/s (to remember it: decode_share_prior.h).
  std::function<void(double share, double images_per_second)> on_hold;
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  DecodeShareControllerOptions controller;
};

// Owns `inner`. Owned by the training thread, like every BatchFeeder: Next() calls
// inner->Next(), shows the batch to the controller (with plan.adaptive) and asks the ring
// for the share the controller wants, then updates the gauge with the batch's share and
// how it came about (DecodeShareMode).
std::unique_ptr<BatchFeeder> MakeShareControlledFeeder(std::unique_ptr<BatchFeeder> inner,
                                                       ShareControl control);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_SHARE_CONTROLLED_FEEDER_H_
