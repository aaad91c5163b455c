// FakeBatchSource: a data-service ring in host memory for the tests of batch feeders. Its
// batches are numbered (epoch, step) as the service numbers them and carry bytes, labels and
// sample indices that are pure functions of the batch's number, so a test knows what every
// batch must hold. It behaves like the service at its most hostile: the moment a slot is
// released it is overwritten with poison, as a producer refilling it at once would, so a
// copy still reading a released slot carries poison into the batch. Only tests link this.
#ifndef STOKER_TRAINER_INPUT_FAKE_BATCH_SOURCE_H_
#define STOKER_TRAINER_INPUT_FAKE_BATCH_SOURCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

struct FakeBatchSourceOptions {
  int slots = 3;
  int batch_size = 4;  // samples a slot holds
  int image_size = 8;
  // In all; then Acquire waits its timeout (at most a second) and says DeadlineExceeded,
  // as it does while every slot is taken.
  int64_t batches = 8;
  int64_t batches_per_epoch = 1 << 30;
  // > 0: the last batch of each epoch holds this many samples (a partial batch).
  int last_batch_count = 0;
  // false: the slots are written once, here, and never poisoned: a source that costs
  // nothing, for timing.
  bool refill = true;
  absl::Duration delay;  // each batch takes this long to arrive
  double gpu_decode_share = 0.0;
  // >= 0: in every batch, this sample is marked as a deferred JPEG (its bytes are not one).
  int deferred_sample = -1;
  // ReportBadSample answers as the data service does under --bad_files=fail: DataLoss.
  bool bad_files_fail = false;
};

// Acquire and Release are called from one thread at a time (a feeder's training or
// prefetch thread); the counters may be read from any thread.
class FakeBatchSource final : public BatchSource {
 public:
  explicit FakeBatchSource(const FakeBatchSourceOptions& options);

  // What batch `number` (counted over every epoch from 0) holds: byte `offset` of its
  // images (NHWC), the label and the dataset index of its sample `i`.
  static uint8_t Byte(int64_t number, size_t offset);
  static int32_t Label(int64_t number, int i) { return static_cast<int32_t>(number * 1000 + i); }
  static int64_t SampleIndex(int64_t number, int i) { return number * 100000 + 7 * i; }

  // Acquire of batch `number` (and only that one) returns `status` instead. Call before
  // the feeder starts.
  void FailAcquireOf(int64_t number, absl::Status status);

  absl::StatusOr<data_service::BatchView> Acquire(absl::Duration timeout) override;
  absl::Status Release(const data_service::BatchView& batch) override;
  // Records the report; answers "sample N" (or, with bad_files_fail, DataLoss naming it).
  absl::StatusOr<std::string> ReportBadSample(int64_t epoch, int64_t sample_index,
                                              absl::string_view why) override;
  void* memory_base() const override { return const_cast<uint8_t*>(memory_.data()); }
  size_t memory_bytes() const override { return memory_.size(); }

  const FakeBatchSourceOptions& options() const { return options_; }
  // The number of samples batch `number` holds.
  int CountOf(int64_t number) const;
  // The reports so far: (sample index, why). Read once the feeder is idle or gone.
  std::vector<std::pair<int64_t, std::string>> reports() const;
  int64_t acquired() const { return acquired_.load(); }
  int64_t released() const { return released_.load(); }

 private:
  uint8_t* SlotImages(int slot) { return memory_.data() + slot * slot_stride_; }
  int32_t* SlotLabels(int slot) {
    return reinterpret_cast<int32_t*>(SlotImages(slot) + slot_image_bytes_);
  }

  const FakeBatchSourceOptions options_;
  const size_t slot_image_bytes_;
  const size_t slot_stride_;  // images, then labels, 8-byte aligned
  std::vector<uint8_t> memory_;
  std::vector<std::vector<int64_t>> sample_indices_;  // per slot
  std::vector<std::vector<uint8_t>> sample_kinds_;    // per slot
  std::deque<int> free_;
  int64_t next_ = 0;
  int64_t fail_number_ = -1;
  absl::Status fail_status_;
  mutable absl::Mutex reports_mu_;
  std::vector<std::pair<int64_t, std::string>> reports_ ABSL_GUARDED_BY(reports_mu_);
  std::atomic<int64_t> acquired_{0};
  std::atomic<int64_t> released_{0};
};

// Options for batches of `batch_size` images of `image_size` pixels, fp32, whose
// normalisation turns each byte into itself as a float ((v / 255 - 0) / (1 / 255)), so that
// a feeder's images compare with the bytes of the source's slots. The timeout is 30 s.
FeederOptions IdentityFeederOptions(int batch_size, int image_size);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_FAKE_BATCH_SOURCE_H_
