#include "trainer/input/share_controlled_feeder.h"

#include <cmath>
#include <optional>
#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

bool SameShare(double a, double b) { return std::fabs(a - b) < 0.5e-6; }

class ShareControlledFeeder final : public BatchFeeder {
 public:
  ShareControlledFeeder(std::unique_ptr<BatchFeeder> inner, ShareControl control)
      : inner_(std::move(inner)), control_(std::move(control)), requested_(control_.plan.initial) {
    if (control_.plan.adaptive) controller_.emplace(control_.controller, control_.plan.initial);
  }

  ~ShareControlledFeeder() override {
    if (!control_.log_changes || !controller_.has_value()) return;
    LogInfo(
        "GPU decode share at the end: %.3f (%s); the last window at %.3f: %.0f images/s on this "
        "rank",
        controller_->requested(), DecodeSharePhaseName(controller_->phase()),
        controller_->last_rate_share(), controller_->last_rate());
  }

  absl::StatusOr<TrainingBatch> Next() override {
    ASSIGN_OR_RETURN(TrainingBatch batch, inner_->Next());
    DecodeShareGauge::Reading reading;
    reading.share = batch.gpu_decode_share;
    if (controller_.has_value()) {
      const DecodeShareController::Phase before = controller_->phase();
      // The GPU's own wait where the feeder measures it: the host's wait for a batch is long
      // whenever the training thread runs steps ahead of the GPU.
      const double want =
          controller_->Observe(batch.gpu_decode_share, batch.count,
                               batch.gpu_input_wait.value_or(batch.data_wait), control_.clock());
      if (!SameShare(want, requested_)) {
        requested_ = want;
        if (control_.request) control_.request(want);
      }
      if (control_.log_changes && (controller_->phase() != before || want != last_logged_)) {
        last_logged_ = want;
        LogInfo("GPU decode share %.3f: %s (last window %.0f images/s on this rank)", want,
                DecodeSharePhaseName(controller_->phase()), controller_->last_rate());
      }
      const bool fixed = controller_->phase() == DecodeShareController::Phase::kFixedByService;
      reading.mode = fixed ? DecodeShareMode::kService : DecodeShareMode::kAdaptive;
      reading.settled = controller_->settled();
    } else if (!SameShare(batch.gpu_decode_share, control_.plan.initial)) {
      reading.mode = DecodeShareMode::kService;
    } else {
      reading.mode = control_.plan.initial > 0 ? DecodeShareMode::kFixed : DecodeShareMode::kOff;
    }
    if (control_.gauge != nullptr) control_.gauge->Set(reading);
    return batch;
  }

 private:
  std::unique_ptr<BatchFeeder> inner_;
  ShareControl control_;
  std::optional<DecodeShareController> controller_;
  double requested_;
  double last_logged_ = -1;
};

}  // namespace

std::unique_ptr<BatchFeeder> MakeShareControlledFeeder(std::unique_ptr<BatchFeeder> inner,
                                                       ShareControl control) {
  return std::make_unique<ShareControlledFeeder>(std::move(inner), std::move(control));
}

}  // namespace stoker::trainer
