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

struct ShareControl {
  // The ring's plan: the share already requested when it connected, and whether to adapt.
  GpuDecodeSharePlan plan;
  // Asks the ring for a share from its next batch on (RingClient::RequestGpuDecodeShare).
  // Called on the training thread.
  std::function<void(double)> request;
  DecodeShareGauge* gauge = nullptr;  // where the share in use goes; may be null; outlives
  bool log_changes = false;           // log each change (rank 0)
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
