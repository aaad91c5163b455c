// What the service does about unusable samples (missing, unreadable, empty, corrupt or
// truncated files, non-images, decompression bombs): the --bad_files policy, the set of
// samples already found bad (so each is warned about and counted once), and the
// service-wide counters that stop a run whose data is mostly broken.
//
// Note [Replacing bad samples]
// With --bad_files=skip, a sample that cannot be used is replaced by the next sample in
// the rank's epoch order (wrapping around) that loads. The choice depends only on the
// epoch's order and on which files are bad, never on timing or the thread count, so
// batches stay full and bit-identical whatever --threads is. The slot's sample index
// and label are those of the replacement. Every load is tried afresh, even of a sample
// found bad before: whether a sample loads is a pure function of (file, seed, epoch,
// index) (a truncated JPEG still serves a crop that needs only its intact rows), so a
// resumed run or a second rank sharing the service makes the same choices; a bad file
// costs one failed read and decode each time it comes up. Each replacement counts as one skipped
// sample; once more than --max_bad_fraction of the samples seen (counted from at least min_samples,
// so that the first few cannot trip it) were skipped, production fails with DataLoss. With
// --bad_files=fail, the first unusable sample stops production with an error naming its file.
#ifndef STOKER_DATA_SERVICE_DATASET_BAD_SAMPLES_H_
#define STOKER_DATA_SERVICE_DATASET_BAD_SAMPLES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::data_service {

enum class BadFilePolicy { kSkip, kFail };

// "skip" or "fail"; InvalidArgument naming --bad_files otherwise.
absl::StatusOr<BadFilePolicy> ParseBadFilePolicy(absl::string_view text);
absl::string_view BadFilePolicyName(BadFilePolicy policy);

struct BadSampleOptions {
  BadFilePolicy policy = BadFilePolicy::kSkip;
  // Production fails once skipped > max_fraction * max(seen, min_samples).
  double max_fraction = 0.01;
  int64_t min_samples = 1000;

  // InvalidArgument naming --max_bad_fraction unless 0 <= max_fraction <= 1, and
  // min_samples >= 1.
  absl::Status Validate() const;
};

// Service-wide counts, over every ring and both splits.
struct BadSampleStats {
  int64_t samples_seen = 0;     // sample positions handed to the decoders
  int64_t samples_skipped = 0;  // positions whose own sample was replaced
  int64_t bad_files = 0;        // distinct samples found unusable
};

// The counters one service shares between its trackers. Thread-safe.
class BadSampleCounters {
 public:
  BadSampleStats stats() const;

 private:
  friend class BadSampleTracker;
  std::atomic<int64_t> seen_{0};
  std::atomic<int64_t> skipped_{0};
  std::atomic<int64_t> bad_files_{0};
};

// The bad samples of one dataset (split), under one policy. Thread-safe: the decode
// workers of every ring of that split share it.
//
//   BadSampleTracker bad(options, dataset.size(), counters);
//   absl::Status status = dataset.Load(i, ...);
//   if (IsBadSampleError(status)) bad.MarkBad(i, dataset.Describe(i), status);
class BadSampleTracker {
 public:
  BadSampleTracker(const BadSampleOptions& options, int64_t dataset_size,
                   std::shared_ptr<BadSampleCounters> counters);
  BadSampleTracker(const BadSampleTracker&) = delete;
  BadSampleTracker& operator=(const BadSampleTracker&) = delete;

  const BadSampleOptions& options() const { return options_; }
  bool skips() const { return options_.policy == BadFilePolicy::kSkip; }

  // Whether MarkBad(index) happened before. Lock-free. (For reports: loading never
  // depends on it; see Note [Replacing bad samples].)
  bool IsKnownBad(int64_t index) const;

  // Records that sample `index` (`description` names it and its file) is unusable
  // because of `why`. The first time for this index it logs a warning, which says that it
  // is replaced by `replacement` under --bad_files=skip, and counts a bad file; later calls
  // do nothing.
  void MarkBad(int64_t index, absl::string_view description, const absl::Status& why,
               absl::string_view replacement = "the next usable sample of the epoch");

  // Counts `samples` positions handed to the decoders.
  void AddSeen(int64_t samples);

  // Counts one replaced sample (`description`, unusable because of `why`). DataLoss, with
  // the counts and the flag to change, once the skipped fraction is over the limit.
  absl::Status CountSkip(absl::string_view description, const absl::Status& why);

  BadSampleStats stats() const { return counters_->stats(); }

 private:
  const BadSampleOptions options_;
  const int64_t size_;
  const std::shared_ptr<BadSampleCounters> counters_;
  std::unique_ptr<std::atomic<uint64_t>[]> known_bad_;  // one bit per sample
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_BAD_SAMPLES_H_
