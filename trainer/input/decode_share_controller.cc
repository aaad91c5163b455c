#include "trainer/input/decode_share_controller.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::trainer {
namespace {

// Shares are compared as the ring carries them (millionths).
bool SameShare(double a, double b) { return std::fabs(a - b) < 0.5e-6; }

std::string Percent(double fraction) { return absl::StrFormat("%+.1f%%", 100.0 * fraction); }

}  // namespace

absl::Status DecodeShareControllerOptions::Validate() const {
  auto bad = [](absl::string_view field, auto value) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode share controller: ", field, " out of range: ", value));
  };
  if (!(step > 0 && step <= 1)) return bad("step", step);
  const double stride = ladder_step / step;
  if (!(ladder_step >= step && ladder_step <= 1 && std::fabs(stride - std::round(stride)) < 1e-9)) {
    return bad("ladder_step (a multiple of step in [step, 1])", ladder_step);
  }
  if (!(max_share >= 0 && max_share <= 1)) return bad("max_share", max_share);
  if (warmup_batches < 0) return bad("warmup_batches", warmup_batches);
  if (settle_batches < 0) return bad("settle_batches", settle_batches);
  if (window_batches < 1) return bad("window_batches", window_batches);
  if (!(min_gain >= 0)) return bad("min_gain", min_gain);
  if (!(wait_threshold >= 0 && wait_threshold < 1)) return bad("wait_threshold", wait_threshold);
  if (!(reprobe_drop > 0 && reprobe_drop < 1)) return bad("reprobe_drop", reprobe_drop);
  if (reprobe_windows < 1) return bad("reprobe_windows", reprobe_windows);
  if (recheck_interval <= absl::ZeroDuration()) {
    return bad("recheck_interval", absl::FormatDuration(recheck_interval));
  }
  if (max_recheck_interval < recheck_interval) {
    return bad("max_recheck_interval (at least recheck_interval)",
               absl::FormatDuration(max_recheck_interval));
  }
  if (max_gap <= absl::ZeroDuration()) return bad("max_gap", absl::FormatDuration(max_gap));
  if (follow_batches < 1) return bad("follow_batches", follow_batches);
  return absl::OkStatus();
}

DecodeShareController::DecodeShareController(const DecodeShareControllerOptions& options,
                                             std::optional<double> prior)
    : options_(options),
      max_index_(static_cast<int>(std::floor(options.max_share / options.step + 1e-9))),
      ladder_stride_(
          std::max(1, static_cast<int>(std::lround(options.ladder_step / options.step)))),
      interval_(options.recheck_interval) {
  if (prior.has_value()) {
    phase_ = Phase::kRefining;
    requested_ = ShareOf(IndexOf(*prior));
    last_decision_ = absl::StrFormat("starting from the prior %.3f", requested_);
  } else {
    last_decision_ = "starting the ladder at 0";
  }
  held_ = requested_;
  RestartWindow(options_.warmup_batches);
}

int DecodeShareController::IndexOf(double share) const {
  return std::clamp(static_cast<int>(std::lround(share / options_.step)), 0, max_index_);
}

double DecodeShareController::ShareOf(int index) const { return index * options_.step; }

int DecodeShareController::Choice() const {
  double fastest = 0.0;
  for (const auto& [index, m] : measured_) fastest = std::max(fastest, m.rate);
  for (const auto& [index, m] : measured_) {
    if (m.rate * (1 + options_.min_gain) >= fastest) return index;  // ascending: the cheapest
  }
  return IndexOf(requested_);
}

void DecodeShareController::RestartWindow(int skip) {
  skip_ = skip;
  window_open_ = false;
  window_count_ = 0;
  window_images_ = 0;
  window_wait_ = absl::ZeroDuration();
}

void DecodeShareController::Move(int index, Phase phase) {
  phase_ = phase;
  const double share = ShareOf(index);
  if (SameShare(share, requested_)) return;
  requested_ = share;
  mismatched_ = 0;
  RestartWindow(options_.settle_batches);
}

void DecodeShareController::Hold(int index) {
  held_ = ShareOf(index);
  reference_rate_ = 0.0;
  held_sum_ = 0.0;
  held_windows_ = 0;
  slow_rates_.clear();
  if (!first_settled_.has_value()) first_settled_ = last_window_.end;
  next_check_up_ = false;
  Move(index, Phase::kSettled);
}

void DecodeShareController::AddHeldRate(double rate) {
  held_sum_ += rate;
  ++held_windows_;
  reference_rate_ = held_sum_ / held_windows_;
}

void DecodeShareController::ClimbLadder(int index, const Measure& m) {
  double best = 0.0;
  for (const auto& [i, earlier] : measured_) {
    if (i != index) best = std::max(best, earlier.rate);
  }
  const bool pays = measured_.size() == 1 || m.rate > best * (1 + options_.min_gain);
  const int next = std::min(index + ladder_stride_, max_index_);
  if (!Waits(m.wait_share)) {
    last_decision_ = "the GPU did not wait for input: the ladder stops";
  } else if (!pays) {
    last_decision_ = absl::StrCat("does not pay (", Percent(m.rate / best - 1),
                                  " on the best so far): the ladder stops");
  } else if (next == index) {
    last_decision_ = "the top of the ladder";
  } else {
    last_decision_ = absl::StrFormat("next rung %.3f", ShareOf(next));
    return Move(next, Phase::kLadder);
  }
  Refine();
}

void DecodeShareController::Refine() {
  const int best = Choice();
  const Measure& at_best = measured_.at(best);
  const bool up_allowed = Waits(at_best.wait_share);
  int candidates[2];
  int count = 0;
  auto add = [&](int index, bool allowed) {
    if (allowed && index >= 0 && index <= max_index_ && measured_.count(index) == 0) {
      candidates[count++] = index;
    }
  };
  // The neighbour toward the faster side of what is known first; the cheaper one when
  // nothing tells them apart.
  auto known = [&](int index) {
    auto it = measured_.find(index);
    return it == measured_.end() ? -1.0 : it->second.rate;
  };
  const bool up_first = std::max(known(best + 1), known(best + ladder_stride_)) >
                        std::max(known(best - 1), known(best - ladder_stride_));
  if (up_first) {
    add(best + 1, up_allowed);
    add(best - 1, true);
  } else {
    add(best - 1, true);
    add(best + 1, up_allowed);
  }
  if (count > 0) {
    absl::StrAppend(&last_decision_, absl::StrFormat("; refining from %.3f: trying %.3f",
                                                     ShareOf(best), ShareOf(candidates[0])));
    return Move(candidates[0], Phase::kRefining);
  }
  absl::StrAppend(&last_decision_, absl::StrFormat("; settled at %.3f", ShareOf(best)));
  Hold(best);
}

void DecodeShareController::Decide(const Window& window, absl::Time now) {
  const int index = IndexOf(window.share);
  const Measure m{window.images_per_second, window.wait_share};
  last_decision_.clear();
  switch (phase_) {
    case Phase::kLadder:
      measured_[index] = m;
      return ClimbLadder(index, m);
    case Phase::kRefining: {
      const int before = measured_.empty() ? index : Choice();
      measured_[index] = m;
      last_decision_ = Choice() != before ? "pays" : "does not pay";
      return Refine();
    }
    case Phase::kSettled:
      if (held_windows_ == 0) {
        AddHeldRate(m.rate);
        next_check_ = now + interval_;
        last_decision_ = absl::StrFormat("holding %.3f at %.0f images/s", held_, m.rate);
        return;
      }
      if (m.rate < reference_rate_ * (1 - options_.reprobe_drop)) {
        slow_rates_.push_back(m.rate);
        const std::string fell =
            absl::StrCat(Percent(m.rate / reference_rate_ - 1), " below the held rate");
        if (static_cast<int>(slow_rates_.size()) < options_.reprobe_windows) {
          last_decision_ = absl::StrCat(fell, ", window ", slow_rates_.size(), " of ",
                                        options_.reprobe_windows, " to refine");
          return;
        }
        double slow = 0.0;
        for (double r : slow_rates_) slow += r;
        last_decision_ = absl::StrCat("fell ", fell);
        measured_.clear();
        measured_[index] = {slow / slow_rates_.size(), m.wait_share};
        interval_ = options_.recheck_interval;
        phase_ = Phase::kRefining;
        return Refine();
      }
      for (double r : slow_rates_) AddHeldRate(r);
      slow_rates_.clear();
      AddHeldRate(m.rate);
      if (now >= next_check_) {
        const bool up = index + 1 <= max_index_ && Waits(m.wait_share);
        const bool down = index >= 1;
        if (up || down) {
          const bool go_up = up && (next_check_up_ || !down);
          next_check_up_ = !go_up;
          check_base_ = m;
          last_decision_ =
              absl::StrFormat("rechecking %.3f", ShareOf(go_up ? index + 1 : index - 1));
          return Move(go_up ? index + 1 : index - 1, Phase::kRechecking);
        }
        next_check_ = now + interval_;
      }
      last_decision_ = "holding";
      return;
    case Phase::kRechecking:
      if (m.rate > reference_rate_ * (1 + options_.min_gain)) {
        last_decision_ = absl::StrCat("pays (", Percent(m.rate / reference_rate_ - 1), ")");
        measured_.clear();
        measured_[IndexOf(held_)] = {reference_rate_, check_base_.wait_share};
        measured_[index] = m;
        interval_ = options_.recheck_interval;
        phase_ = Phase::kRefining;
        return Refine();
      }
      interval_ = std::min(2 * interval_, options_.max_recheck_interval);
      next_check_ = now + interval_;
      last_decision_ = absl::StrCat("does not pay (", Percent(m.rate / reference_rate_ - 1),
                                    absl::StrFormat("): back to %.3f, next check in %s", held_,
                                                    absl::FormatDuration(interval_)));
      return Move(IndexOf(held_), Phase::kSettled);
    case Phase::kFixedByService:
      return;
  }
}

double DecodeShareController::Observe(double batch_share, int64_t images, absl::Duration data_wait,
                                      absl::Time now) {
  delivered_ = batch_share;
  if (!seen_batch_) first_batch_ = now;
  const bool gap = seen_batch_ && now - last_batch_ > options_.max_gap;
  seen_batch_ = true;
  last_batch_ = now;
  if (phase_ == Phase::kFixedByService) return requested_;
  if (!SameShare(batch_share, requested_)) {
    // Produced before the request took effect, or the service does not follow it.
    if (++mismatched_ >= options_.follow_batches) {
      phase_ = Phase::kFixedByService;
      last_decision_ = "the batches do not follow the request: no more adapting";
    }
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
  Window window;
  window.share = requested_;
  window.batches = window_count_;
  window.images = window_images_;
  window.length = length;
  window.images_per_second = static_cast<double>(window_images_) / seconds;
  window.wait_share = std::min(1.0, absl::ToDoubleSeconds(window_wait_) / seconds);
  window.end = now;
  last_window_ = window;
  ++windows_;
  // The next window starts where this one ended.
  window_count_ = 0;
  window_images_ = 0;
  window_wait_ = absl::ZeroDuration();
  window_start_ = now;
  Decide(window, now);
  return requested_;
}

const char* DecodeSharePhaseName(DecodeShareController::Phase phase) {
  switch (phase) {
    case DecodeShareController::Phase::kLadder:
      return "ladder";
    case DecodeShareController::Phase::kRefining:
      return "refining";
    case DecodeShareController::Phase::kSettled:
      return "settled";
    case DecodeShareController::Phase::kRechecking:
      return "rechecking";
    case DecodeShareController::Phase::kFixedByService:
      return "fixed by the data service";
  }
  return "?";
}

}  // namespace stoker::trainer
