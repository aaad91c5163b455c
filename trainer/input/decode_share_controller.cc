#include "trainer/input/decode_share_controller.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace stoker::trainer {
namespace {

// Shares are compared as the ring carries them (millionths).
bool SameShare(double a, double b) { return std::fabs(a - b) < 0.5e-6; }

}  // namespace

absl::Status DecodeShareControllerOptions::Validate() const {
  auto bad = [](absl::string_view field, auto value) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode share controller: ", field, " out of range: ", value));
  };
  if (!(step > 0 && step <= 1)) return bad("step", step);
  if (!(max_share >= 0 && max_share <= 1)) return bad("max_share", max_share);
  if (warmup_batches < 0) return bad("warmup_batches", warmup_batches);
  if (settle_batches < 0) return bad("settle_batches", settle_batches);
  if (window_batches < 1) return bad("window_batches", window_batches);
  if (!(min_gain >= 0)) return bad("min_gain", min_gain);
  if (!(wait_threshold >= 0 && wait_threshold < 1)) return bad("wait_threshold", wait_threshold);
  if (!(reprobe_drop > 0 && reprobe_drop < 1)) return bad("reprobe_drop", reprobe_drop);
  if (max_gap <= absl::ZeroDuration()) return bad("max_gap", absl::FormatDuration(max_gap));
  if (follow_batches < 1) return bad("follow_batches", follow_batches);
  return absl::OkStatus();
}

DecodeShareController::DecodeShareController(const DecodeShareControllerOptions& options,
                                             double initial_share)
    : options_(options),
      requested_(std::clamp(initial_share, 0.0, options.max_share)),
      base_share_(requested_) {
  RestartWindow(options_.warmup_batches);
}

void DecodeShareController::RestartWindow(int skip) {
  skip_ = skip;
  window_open_ = false;
  window_count_ = 0;
  window_images_ = 0;
  window_wait_ = absl::ZeroDuration();
}

void DecodeShareController::Move(double share, Phase phase) {
  // On the grid of `step` from 0, so that float sums do not drift.
  const double snapped = std::round(share / options_.step) * options_.step;
  requested_ = std::clamp(snapped, 0.0, options_.max_share);
  phase_ = phase;
  mismatched_ = 0;
  RestartWindow(options_.settle_batches);
}

void DecodeShareController::Settle(double share, double rate) {
  const bool changes = !SameShare(share, requested_);
  requested_ = share;
  phase_ = Phase::kSettled;
  reference_rate_ = rate;
  reprobing_ = false;
  if (changes) {
    mismatched_ = 0;
    RestartWindow(options_.settle_batches);
  }
}

void DecodeShareController::Decide(double rate, double wait_share) {
  const bool waits = wait_share > options_.wait_threshold;
  const bool can_rise = requested_ + 0.5 * options_.step <= options_.max_share;
  const bool can_fall = requested_ >= 0.5 * options_.step;
  const bool pays = rate > base_rate_ * (1 + options_.min_gain);
  // From the base of a probe (its start, or a settled share whose rate fell): up while
  // the trainer waits for data; down only when probing again.
  auto probe_from_base = [&] {
    if (waits && can_rise) return Move(requested_ + options_.step, Phase::kTryingUp);
    if (reprobing_ && can_fall) return Move(requested_ - options_.step, Phase::kTryingDown);
    Settle(base_share_, base_rate_);
  };
  switch (phase_) {
    case Phase::kMeasuringBase:
      base_share_ = requested_;
      base_rate_ = rate;
      moved_ = false;
      return probe_from_base();
    case Phase::kTryingUp:
      if (pays) {
        base_share_ = requested_;
        base_rate_ = rate;
        moved_ = true;
        if (waits && can_rise) return Move(requested_ + options_.step, Phase::kTryingUp);
        return Settle(base_share_, base_rate_);
      }
      // Did not pay: back to the base; a probe again may still try the other way.
      if (!moved_ && reprobing_ && base_share_ >= 0.5 * options_.step) {
        return Move(base_share_ - options_.step, Phase::kTryingDown);
      }
      return Settle(base_share_, base_rate_);
    case Phase::kTryingDown:
      if (pays) {
        base_share_ = requested_;
        base_rate_ = rate;
        moved_ = true;
        if (can_fall) return Move(requested_ - options_.step, Phase::kTryingDown);
        return Settle(base_share_, base_rate_);
      }
      return Settle(base_share_, base_rate_);
    case Phase::kSettled:
      if (rate < reference_rate_ * (1 - options_.reprobe_drop)) {
        reprobing_ = true;
        moved_ = false;
        base_share_ = requested_;
        base_rate_ = rate;
        if (waits && can_rise) return Move(requested_ + options_.step, Phase::kTryingUp);
        if (can_fall) return Move(requested_ - options_.step, Phase::kTryingDown);
        return Settle(requested_, rate);
      }
      return;
    case Phase::kFixedByService:
      return;
  }
}

double DecodeShareController::Observe(double batch_share, int64_t images, absl::Duration data_wait,
                                      absl::Time now) {
  delivered_ = batch_share;
  const bool gap = seen_batch_ && now - last_batch_ > options_.max_gap;
  seen_batch_ = true;
  last_batch_ = now;
  if (phase_ == Phase::kFixedByService) return requested_;
  if (!SameShare(batch_share, requested_)) {
    // Produced before the request took effect, or the service does not follow it.
    if (++mismatched_ >= options_.follow_batches) phase_ = Phase::kFixedByService;
    RestartWindow(options_.settle_batches);
    return requested_;
  }
  mismatched_ = 0;
  if (gap) RestartWindow(options_.settle_batches);
  if (skip_ > 0) {
    --skip_;
    return requested_;
  }
  if (!window_open_) {
    // This batch's arrival starts the window; it is not counted in it.
    window_open_ = true;
    window_start_ = now;
    return requested_;
  }
  ++window_count_;
  window_images_ += images;
  window_wait_ += data_wait;
  const absl::Duration length = now - window_start_;
  if (window_count_ < options_.window_batches || length < options_.min_window) {
    return requested_;
  }
  const double seconds = absl::ToDoubleSeconds(length);
  const double rate = static_cast<double>(window_images_) / seconds;
  const double wait_share = std::min(1.0, absl::ToDoubleSeconds(window_wait_) / seconds);
  last_rate_ = rate;
  last_rate_share_ = requested_;
  // The next window starts where this one ended.
  window_count_ = 0;
  window_images_ = 0;
  window_wait_ = absl::ZeroDuration();
  window_start_ = now;
  Decide(rate, wait_share);
  return requested_;
}

const char* DecodeSharePhaseName(DecodeShareController::Phase phase) {
  switch (phase) {
    case DecodeShareController::Phase::kMeasuringBase:
      return "measuring";
    case DecodeShareController::Phase::kTryingUp:
      return "trying up";
    case DecodeShareController::Phase::kTryingDown:
      return "trying down";
    case DecodeShareController::Phase::kSettled:
      return "settled";
    case DecodeShareController::Phase::kFixedByService:
      return "fixed by the data service";
  }
  return "?";
}

}  // namespace stoker::trainer
