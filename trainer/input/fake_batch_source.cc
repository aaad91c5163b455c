#include "trainer/input/fake_batch_source.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_service/ring/wire_types.h"

namespace stoker::trainer {
namespace {

constexpr absl::Duration kLongestWait = absl::Seconds(1);

}  // namespace

FakeBatchSource::FakeBatchSource(const FakeBatchSourceOptions& options)
    : options_(options),
      slot_image_bytes_(static_cast<size_t>(options.batch_size) * options.image_size *
                        options.image_size * 3),
      slot_stride_((slot_image_bytes_ + options.batch_size * sizeof(int32_t) + 7) / 8 * 8),
      memory_(options.slots * slot_stride_ + 4096),
      sample_indices_(options.slots, std::vector<int64_t>(options.batch_size)),
      sample_kinds_(options.slots, std::vector<uint8_t>(options.batch_size)) {
  for (int i = 0; i < options_.slots; ++i) free_.push_back(i);
  if (!options_.refill) std::memset(memory_.data(), 7, memory_.size());
}

uint8_t FakeBatchSource::Byte(int64_t number, size_t offset) {
  return static_cast<uint8_t>((offset * 2654435761u + number * 97u) >> 13);
}

void FakeBatchSource::FailAcquireOf(int64_t number, absl::Status status) {
  fail_number_ = number;
  fail_status_ = std::move(status);
}

int FakeBatchSource::CountOf(int64_t number) const {
  const bool last_of_epoch = number % options_.batches_per_epoch == options_.batches_per_epoch - 1;
  return last_of_epoch && options_.last_batch_count > 0 ? options_.last_batch_count
                                                        : options_.batch_size;
}

absl::StatusOr<data_service::BatchView> FakeBatchSource::Acquire(absl::Duration timeout) {
  if (next_ == fail_number_) {
    fail_number_ = -1;
    return fail_status_;
  }
  if (next_ >= options_.batches || free_.empty()) {
    // As the ring does when nothing is ready: wait, then say so.
    absl::SleepFor(std::min(timeout, kLongestWait));
    return absl::DeadlineExceededError(
        next_ >= options_.batches ? "no more batches" : "every slot is taken: none was released");
  }
  absl::SleepFor(options_.delay);
  const int slot = free_.front();
  free_.pop_front();
  const int count = CountOf(next_);
  uint8_t* images = SlotImages(slot);
  if (options_.refill) {
    for (size_t i = 0; i < slot_image_bytes_; ++i) images[i] = Byte(next_, i);
  }
  int32_t* labels = SlotLabels(slot);
  std::vector<int64_t>& indices = sample_indices_[slot];
  std::vector<uint8_t>& kinds = sample_kinds_[slot];
  for (int i = 0; i < options_.batch_size; ++i) {
    labels[i] = Label(next_, i);
    indices[i] = SampleIndex(next_, i);
    kinds[i] = static_cast<uint8_t>(data_service::SampleKind::kPixels);
  }
  data_service::BatchView view;
  if (options_.deferred_sample >= 0 && options_.deferred_sample < count) {
    kinds[options_.deferred_sample] = static_cast<uint8_t>(data_service::SampleKind::kDeferredJpeg);
    view.deferred_count = 1;
  }
  view.slot = slot;
  view.epoch = next_ / options_.batches_per_epoch;
  view.step = next_ % options_.batches_per_epoch;
  view.count = count;
  view.images = images;
  view.labels = labels;
  view.sample_indices = indices.data();
  view.sample_kinds = kinds.data();
  view.gpu_decode_share = options_.gpu_decode_share;
  ++next_;
  ++acquired_;
  return view;
}

absl::Status FakeBatchSource::Release(const data_service::BatchView& batch) {
  if (options_.refill) std::memset(SlotImages(batch.slot), 0xAA, slot_image_bytes_);
  free_.push_back(batch.slot);
  ++released_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeBatchSource::ReportBadSample(int64_t, int64_t sample_index,
                                                             absl::string_view why) {
  {
    absl::MutexLock lock(&reports_mu_);
    reports_.emplace_back(sample_index, std::string(why));
  }
  const std::string name = absl::StrCat("sample ", sample_index);
  if (options_.bad_files_fail) {
    return absl::DataLossError(absl::StrCat(name, " (--bad_files=fail): ", why));
  }
  return name;
}

std::vector<std::pair<int64_t, std::string>> FakeBatchSource::reports() const {
  absl::MutexLock lock(&reports_mu_);
  return reports_;
}

FeederOptions IdentityFeederOptions(int batch_size, int image_size) {
  FeederOptions options;
  options.batch_size = batch_size;
  options.image_size = image_size;
  options.dtype = at::kFloat;
  for (int c = 0; c < 3; ++c) {
    options.mean[c] = 0.0f;
    options.stddev[c] = 1.0f / 255.0f;
  }
  options.timeout = absl::Seconds(30);
  return options;
}

}  // namespace stoker::trainer
