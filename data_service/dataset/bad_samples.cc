#include "data_service/dataset/bad_samples.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace stoker::data_service {

absl::StatusOr<BadFilePolicy> ParseBadFilePolicy(absl::string_view text) {
  if (text == "skip") return BadFilePolicy::kSkip;
  if (text == "fail") return BadFilePolicy::kFail;
  return absl::InvalidArgumentError(
      absl::StrCat("--bad_files: must be skip or fail, got \"", text, "\""));
}

absl::string_view BadFilePolicyName(BadFilePolicy policy) {
  return policy == BadFilePolicy::kSkip ? "skip" : "fail";
}

absl::Status BadSampleOptions::Validate() const {
  if (!(max_fraction >= 0.0 && max_fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_bad_fraction: must be in [0, 1], got ", max_fraction));
  }
  if (min_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad-sample min_samples must be at least 1, got ", min_samples));
  }
  return absl::OkStatus();
}

BadSampleStats BadSampleCounters::stats() const {
  BadSampleStats stats;
  stats.samples_seen = seen_.load(std::memory_order_relaxed);
  stats.samples_skipped = skipped_.load(std::memory_order_relaxed);
  stats.bad_files = bad_files_.load(std::memory_order_relaxed);
  return stats;
}

BadSampleTracker::BadSampleTracker(const BadSampleOptions& options, int64_t dataset_size,
                                   std::shared_ptr<BadSampleCounters> counters)
    : options_(options),
      size_(std::max<int64_t>(0, dataset_size)),
      counters_(counters != nullptr ? std::move(counters) : std::make_shared<BadSampleCounters>()),
      known_bad_(new std::atomic<uint64_t>[(size_ + 63) / 64]()) {}

bool BadSampleTracker::IsKnownBad(int64_t index) const {
  if (index < 0 || index >= size_) return false;
  const uint64_t bit = uint64_t{1} << (index % 64);
  return (known_bad_[index / 64].load(std::memory_order_relaxed) & bit) != 0;
}

void BadSampleTracker::MarkBad(int64_t index, absl::string_view description,
                               const absl::Status& why, absl::string_view replacement) {
  if (index < 0 || index >= size_) return;
  const uint64_t bit = uint64_t{1} << (index % 64);
  if ((known_bad_[index / 64].fetch_or(bit, std::memory_order_relaxed) & bit) != 0) return;
  counters_->bad_files_.fetch_add(1, std::memory_order_relaxed);
  if (options_.policy == BadFilePolicy::kSkip) {
    LogWarning("unusable %s: %s; it is replaced by %s (--bad_files=skip; warned once per file)",
               description, why.message(), replacement);
  }
}

void BadSampleTracker::AddSeen(int64_t samples) {
  counters_->seen_.fetch_add(samples, std::memory_order_relaxed);
}

absl::Status BadSampleTracker::CountSkip(absl::string_view description, const absl::Status& why) {
  const int64_t skipped = counters_->skipped_.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t seen = counters_->seen_.load(std::memory_order_relaxed);
  const double allowed =
      options_.max_fraction * static_cast<double>(std::max(seen, options_.min_samples));
  if (static_cast<double>(skipped) <= allowed) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "too many unusable samples: %d of the %d samples seen (%.2f%%) had to be replaced, more "
      "than --max_bad_fraction=%g allows (counted over at least %d samples); the last was %s: "
      "%s. Fix or remove the bad files, or raise --max_bad_fraction",
      skipped, seen, 100.0 * skipped / std::max<int64_t>(seen, 1), options_.max_fraction,
      options_.min_samples, description, why.message()));
}

}  // namespace stoker::data_service
