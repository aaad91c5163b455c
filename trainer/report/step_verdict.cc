#include "trainer/report/step_verdict.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace stoker::trainer {
namespace {

// The stages a rank spends its own time in, in the order ties are broken.
constexpr std::array<const char*, 3> kOwnStages = {"input", "copy", "compute"};

double Stage(const RankStepTimes& t, int stage) {
  switch (stage) {
    case 0:
      return t.input_ms;
    case 1:
      return t.copy_ms;
    case 2:
      return t.compute_ms;
    default:
      return t.comm_ms;
  }
}

double Own(const RankStepTimes& t) { return t.input_ms + t.copy_ms + t.compute_ms; }

std::string Place(const RankPlace& place) {
  return absl::StrFormat("rank %d on %s (node %d)", place.rank, place.host, place.node);
}

}  // namespace

const char* StepBoundName(StepBound bound) {
  switch (bound) {
    case StepBound::kInput:
      return "input";
    case StepBound::kCopy:
      return "copy";
    case StepBound::kCompute:
      return "compute";
    case StepBound::kCommunication:
      return "communication";
    case StepBound::kStraggler:
      return "straggler";
  }
  return "?";
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Note [Step verdict] in step_verdict.h.
StepVerdict JudgeStep(int64_t step, const std::vector<RankStepTimes>& ranks,
                      const std::vector<RankPlace>& places, double median_ms) {
  StepVerdict verdict;
  verdict.step = step;
  verdict.median_ms = median_ms;
  const int world = static_cast<int>(ranks.size());
  for (const RankStepTimes& t : ranks) verdict.step_ms = std::max(verdict.step_ms, t.step_ms);
  std::string head = absl::StrFormat("step %d: %.1f ms", step, verdict.step_ms);
  if (median_ms > 0) {
    absl::StrAppend(&head, absl::StrFormat(", %+.1f ms against the median (%.1f ms)",
                                           verdict.step_ms - median_ms, median_ms));
  }

  int worst = 0;
  for (int r = 1; r < world; ++r) {
    if (Own(ranks[r]) > Own(ranks[worst])) worst = r;
  }
  if (world > 1) {
    std::vector<double> others_own;
    for (int r = 0; r < world; ++r) {
      if (r != worst) others_own.push_back(Own(ranks[r]));
    }
    const double excess = Own(ranks[worst]) - Median(others_own);
    if (excess > std::max(2.0, 0.1 * verdict.step_ms)) {
      int stage = 0;
      double stage_excess = -1e300;
      for (int s = 0; s < static_cast<int>(kOwnStages.size()); ++s) {
        std::vector<double> others;
        for (int r = 0; r < world; ++r) {
          if (r != worst) others.push_back(Stage(ranks[r], s));
        }
        const double e = Stage(ranks[worst], s) - Median(others);
        if (e > stage_excess) {
          stage_excess = e;
          stage = s;
        }
      }
      for (int r = 0; r < world; ++r) {
        if (r != worst) verdict.others_comm_ms = std::max(verdict.others_comm_ms, ranks[r].comm_ms);
      }
      verdict.bound = stage == 0   ? StepBound::kInput
                      : stage == 1 ? StepBound::kCopy
                                   : StepBound::kStraggler;
      verdict.rank = places[worst].rank;
      verdict.host = places[worst].host;
      verdict.node = places[worst].node;
      verdict.stage = kOwnStages[stage];
      verdict.stage_ms = Stage(ranks[worst], stage);
      verdict.excess_ms = stage_excess;
      std::string what;
      if (stage == 0) {
        what = absl::StrFormat(
            "input: %s waited %.1f ms for input, %.1f ms more than the other ranks' median: "
            "node %d's data service is behind",
            Place(places[worst]), verdict.stage_ms, stage_excess, verdict.node);
      } else {
        what =
            absl::StrFormat("%s: %s spent %.1f ms in %s, %.1f ms more than the other ranks' median",
                            StepBoundName(verdict.bound), Place(places[worst]), verdict.stage_ms,
                            verdict.stage, stage_excess);
      }
      verdict.text = absl::StrFormat("%s; %s; the others waited up to %.1f ms in collectives", head,
                                     what, verdict.others_comm_ms);
      return verdict;
    }
  }
  // No rank stands out: the stage every rank spends most in.
  int stage = 0;
  double best = -1;
  for (int s = 0; s < 4; ++s) {
    double sum = 0;
    for (const RankStepTimes& t : ranks) sum += Stage(t, s);
    const double mean = world > 0 ? sum / world : 0;
    if (mean > best) {
      best = mean;
      stage = s;
    }
  }
  constexpr std::array<StepBound, 4> kBounds = {StepBound::kInput, StepBound::kCopy,
                                                StepBound::kCompute, StepBound::kCommunication};
  verdict.bound = kBounds[stage];
  verdict.stage = StepBoundName(verdict.bound);
  verdict.stage_ms = best;
  verdict.text = absl::StrFormat(
      "%s; %s: no rank stands out, the ranks spend %.1f ms in %s "
      "on average",
      head, verdict.stage, best, verdict.stage);
  return verdict;
}

void VerdictSummary::Add(const StepVerdict& verdict) {
  ++steps_;
  ++by_bound_[verdict.bound];
  if (verdict.rank < 0) return;
  Culprit& culprit = culprits_[{verdict.rank, verdict.stage}];
  ++culprit.count;
  culprit.excess_ms += verdict.excess_ms;
  culprit.host = verdict.host;
  culprit.node = verdict.node;
}

StepBound VerdictSummary::bound() const {
  StepBound best = StepBound::kCompute;
  int count = 0;
  for (const auto& [bound, n] : by_bound_) {
    if (n > count) {
      best = bound;
      count = n;
    }
  }
  return best;
}

const VerdictSummary::Culprit* VerdictSummary::MostNamed(std::pair<int, std::string>* key) const {
  const Culprit* best = nullptr;
  for (const auto& [k, culprit] : culprits_) {
    if (best == nullptr || culprit.count > best->count) {
      best = &culprit;
      *key = k;
    }
  }
  return best;
}

int VerdictSummary::culprit_rank() const {
  std::pair<int, std::string> key;
  return MostNamed(&key) != nullptr ? key.first : -1;
}

std::string VerdictSummary::culprit_stage() const {
  std::pair<int, std::string> key;
  return MostNamed(&key) != nullptr ? key.second : std::string();
}

double VerdictSummary::culprit_excess_ms() const {
  std::pair<int, std::string> key;
  const Culprit* culprit = MostNamed(&key);
  return culprit != nullptr ? culprit->excess_ms / culprit->count : 0;
}

std::string VerdictSummary::Text() const {
  std::vector<std::string> counts;
  for (const auto& [bound, n] : by_bound_)
    counts.push_back(absl::StrCat(StepBoundName(bound), " ", n));
  std::string text =
      absl::StrFormat("trace verdict over %d step%s: bound by %s (%s)", steps_,
                      steps_ == 1 ? "" : "s", StepBoundName(bound()), absl::StrJoin(counts, ", "));
  std::pair<int, std::string> key;
  const Culprit* culprit = MostNamed(&key);
  if (culprit != nullptr) {
    absl::StrAppend(&text,
                    absl::StrFormat("; most often held back by rank %d on %s (node %d), "
                                    "%s, %.1f ms over the other ranks per step, in %d of "
                                    "%d steps",
                                    key.first, culprit->host, culprit->node, key.second,
                                    culprit->excess_ms / culprit->count, culprit->count, steps_));
  }
  return text;
}

}  // namespace stoker::trainer
