#include "trainer/input/share_controlled_feeder.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

bool SameShare(double a, double b) { return std::fabs(a - b) < 0.5e-6; }

class ShareControlledFeeder final : public BatchFeeder {
 public:
  ShareControlledFeeder(std::unique_ptr<BatchFeeder> inner, ShareControl control)
      : inner_(std::move(inner)), control_(std::move(control)), requested_(control_.plan.initial) {
    if (control_.plan.adaptive) controller_.emplace(control_.controller, control_.plan.prior);
  }

  ~ShareControlledFeeder() override {
    if (!control_.log_changes || !controller_.has_value()) return;
    LogInfo(
        "GPU decode share at the end: %.3f (%s); the last window at %.3f: %.0f images/s on this "
        "rank",
        controller_->requested(), DecodeSharePhaseName(controller_->phase()),
        controller_->last_rate_share(), controller_->last_rate());
    // Note [The share's trajectory]: the figures a whole-run comparison needs.
    const absl::Time first = controller_->first_batch();
    const std::optional<absl::Time> settled = controller_->first_settled();
    LogInfo(
        "GPU decode share trajectory: %lld images in %.2f s from the first batch to the last; %s; "
        "%lld windows",
        static_cast<long long>(images_), absl::ToDoubleSeconds(last_batch_ - first),
        settled.has_value()
            ? absl::StrFormat("first settled after %.2f s", absl::ToDoubleSeconds(*settled - first))
            : std::string("never settled"),
        static_cast<long long>(controller_->windows()));
  }

  // A window ended: log it, and pass a newly held share on.
  void WindowDone() {
    const DecodeShareController& c = *controller_;
    const DecodeShareController::Window& w = c.last_window();
    if (control_.log_windows) {
      // Note [The share's trajectory]: tools/gpu_checks.sh reads these lines.
      LogInfo(
          "GPU decode share window %lld: t=%.3f s images=%lld share=%.3f rate=%.0f images/s over "
          "%d batches in %.3f s, GPU waits %.0f%%: %s -> %.3f (%s)",
          static_cast<long long>(c.windows()), absl::ToDoubleSeconds(w.end - c.first_batch()),
          static_cast<long long>(images_), w.share, w.images_per_second, w.batches,
          absl::ToDoubleSeconds(w.length), 100.0 * w.wait_share, c.last_decision(), c.requested(),
          DecodeSharePhaseName(c.phase()));
    }
    if (c.settled() && c.held_rate() > 0 && c.held() != remembered_ && control_.on_hold) {
      remembered_ = c.held();
      control_.on_hold(c.held(), c.held_rate());
    }
  }

  absl::StatusOr<TrainingBatch> Next() override {
    ASSIGN_OR_RETURN(TrainingBatch batch, inner_->Next());
    DecodeShareGauge::Reading reading;
    reading.share = batch.gpu_decode_share;
    if (controller_.has_value()) {
      const DecodeShareController::Phase before = controller_->phase();
      const int64_t windows_before = controller_->windows();
      // The GPU's own wait where the feeder measures it: the host's wait for a batch is long
      // whenever the training thread runs steps ahead of the GPU.
      const absl::Time now = control_.clock();
      const double want = controller_->Observe(batch.gpu_decode_share, batch.count,
                                               batch.gpu_input_wait.value_or(batch.data_wait), now);
      images_ += batch.count;
      last_batch_ = now;
      if (controller_->windows() != windows_before) WindowDone();
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
  double remembered_ = -1;  // the held share last passed to on_hold
  int64_t images_ = 0;      // adaptive: images taken since the first batch
  absl::Time last_batch_;
};

}  // namespace

std::unique_ptr<BatchFeeder> MakeShareControlledFeeder(std::unique_ptr<BatchFeeder> inner,
                                                       ShareControl control) {
  return std::make_unique<ShareControlledFeeder>(std::move(inner), std::move(control));
}

}  // namespace stoker::trainer
