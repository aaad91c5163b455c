#include "data_service/ring/ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shm_atomic.h"

namespace stoker::data_service {

// Note [Ring slot states]
// Each slot has one 32-bit state word. For ring position p (0, 1, 2, ... over the life of
// the ring; slot p % slot_count), the word holds
//   2p      the slot is free for the producer to write position p,
//   2p + 1  position p is written and published for the consumer.
// Initially slot i holds 2i. The producer claims position p by waiting for 2p, writes
// the images and metadata, then stores 2p + 1 with release ordering. The consumer waits
// for 2p + 1 (acquire: it sees every byte written before the store), reads, and on
// release stores 2(p + slot_count) (release: its reads happen before the producer's next
// writes, which start after an acquire load of that value). So a slot is never read
// before it is fully written and never rewritten before the consumer let go of it. The
// values are compared modulo 2^32 and only for equality, which is exact while
// 2 * slot_count < 2^32. Unlike a pair of head/tail counters, per-slot words let the
// consumer release slots out of order, and make a double release detectable.

// Note [Futex words in shared memory]
// Waiting uses the futex system call directly on the slot state words, not process-shared
// semaphores or mutexes:
//  - nothing can be left locked: if either process dies mid-operation the other only
//    sees a word that no longer changes, and its timed wait returns (a process-shared
//    mutex would need robust-mutex recovery, a semaphore would keep a stale count);
//  - the state word is the data (the position), so waits are checked against the exact
//    position expected, and a FUTEX_WAIT only sleeps if the word still holds the value
//    seen, so no wake-up can be lost between the check and the sleep;
//  - FUTEX_WAIT takes a relative timeout on CLOCK_MONOTONIC, so wall-clock jumps do not
//    stretch a wait (sem_timedwait measures CLOCK_REALTIME).
// The futexes are shared (no FUTEX_PRIVATE_FLAG): the kernel keys them by the mapped
// file and offset, so the two processes' different virtual addresses meet. The structs
// stay trivially copyable: the words are plain uint32_t read and written through
// common/shm_atomic.h (Note [Atomics in shared memory] there).

namespace internal {

void FutexWait(uint32_t* word, uint32_t expected, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  const timespec ts = absl::ToTimespec(timeout);
  // EAGAIN (value changed), EINTR and ETIMEDOUT all mean "look again".
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool WaitForWord(uint32_t* word, uint32_t target, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const uint32_t seen = LoadAcquire(word);
    if (seen == target) return true;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    FutexWait(word, seen, left);
  }
}

}  // namespace internal

namespace {

uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

RingSlotMeta* SlotMeta(uint8_t* base, const RingLayout& layout, int32_t slot) {
  return reinterpret_cast<RingSlotMeta*>(base + layout.slot_meta_offset +
                                         layout.slot_meta_stride * slot);
}

uint32_t FreeState(uint64_t position) { return static_cast<uint32_t>(2 * position); }
uint32_t PublishedState(uint64_t position) { return static_cast<uint32_t>(2 * position + 1); }

}  // namespace

absl::StatusOr<RingLayout> RingLayout::For(const RingGeometry& geometry) {
  if (geometry.slot_count < 1 || geometry.slot_count > kMaxSlotCount) {
    return absl::InvalidArgumentError(absl::StrCat("ring slot_count must be in 1..", kMaxSlotCount,
                                                   ", got ", geometry.slot_count));
  }
  if (geometry.batch_size < 1 || geometry.batch_size > kMaxBatchSize) {
    return absl::InvalidArgumentError(absl::StrCat("ring batch_size must be in 1..", kMaxBatchSize,
                                                   ", got ", geometry.batch_size));
  }
  if (geometry.image_size < 1 || geometry.image_size > kMaxImageSize) {
    return absl::InvalidArgumentError(absl::StrCat("ring image_size must be in 1..", kMaxImageSize,
                                                   ", got ", geometry.image_size));
  }
  // With the limits above every product below fits in 64 bits (2^10 * 2^16 * 2^26 * 3).
  const uint64_t batch = static_cast<uint64_t>(geometry.batch_size);
  const uint64_t side = static_cast<uint64_t>(geometry.image_size);
  RingLayout layout;
  layout.geometry = geometry;
  layout.slot_meta_offset = kRingPageBytes;
  layout.indices_offset = sizeof(RingSlotMeta);
  layout.labels_offset = layout.indices_offset + batch * sizeof(int64_t);
  layout.kinds_offset = layout.labels_offset + batch * sizeof(int32_t);
  layout.slot_meta_stride = RoundUp(layout.kinds_offset + batch * sizeof(uint8_t), 64);
  layout.image_offset = RoundUp(
      layout.slot_meta_offset + layout.slot_meta_stride * geometry.slot_count, kRingPageBytes);
  layout.batch_image_bytes = batch * side * side * 3;
  layout.image_stride = RoundUp(layout.batch_image_bytes, kRingPageBytes);
  layout.total_bytes = layout.image_offset + layout.image_stride * geometry.slot_count;
  return layout;
}

absl::StatusOr<RingProducer> RingProducer::Initialize(void* base, size_t bytes,
                                                      const RingGeometry& geometry) {
  absl::StatusOr<RingLayout> layout = RingLayout::For(geometry);
  if (!layout.ok()) return layout.status();
  if (reinterpret_cast<uintptr_t>(base) % kRingPageBytes != 0) {
    return absl::InvalidArgumentError("ring base must be page-aligned");
  }
  if (bytes < layout->total_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring needs ", layout->total_bytes, " bytes, the mapping has ", bytes));
  }
  uint8_t* bytes_base = static_cast<uint8_t*>(base);
  std::memset(bytes_base, 0, layout->image_offset);
  RingHeader header;
  std::memset(&header, 0, sizeof(header));
  header.magic = kRingMagic;
  header.version = kRingVersion;
  header.header_bytes = sizeof(RingHeader);
  header.slot_count = geometry.slot_count;
  header.batch_size = geometry.batch_size;
  header.image_size = geometry.image_size;
  header.slot_meta_offset = layout->slot_meta_offset;
  header.slot_meta_stride = layout->slot_meta_stride;
  header.image_offset = layout->image_offset;
  header.image_stride = layout->image_stride;
  header.total_bytes = layout->total_bytes;
  std::memcpy(bytes_base, &header, sizeof(header));
  for (int32_t slot = 0; slot < geometry.slot_count; ++slot) {
    StoreRelease(&SlotMeta(bytes_base, *layout, slot)->state, FreeState(slot));
  }
  return RingProducer(bytes_base, *layout);
}

absl::StatusOr<WritableSlot> RingProducer::Claim(absl::Duration timeout) {
  const int32_t slot_count = layout_.geometry.slot_count;
  if (claimed() >= slot_count) {
    return absl::FailedPreconditionError(
        absl::StrCat("every one of the ", slot_count, " ring slots is already claimed"));
  }
  const uint64_t position = next_claim_;
  const int32_t slot = static_cast<int32_t>(position % slot_count);
  RingSlotMeta* meta = SlotMeta(base_, layout_, slot);
  if (!internal::WaitForWord(&meta->state, FreeState(position), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("ring slot ", slot, " (position ", position,
                                                    ") was not released by the consumer within ",
                                                    absl::FormatDuration(timeout)));
  }
  ++next_claim_;
  WritableSlot writable;
  writable.slot = slot;
  writable.position = position;
  writable.images = base_ + layout_.image_offset + layout_.image_stride * slot;
  uint8_t* meta_bytes = reinterpret_cast<uint8_t*>(meta);
  writable.sample_indices = reinterpret_cast<int64_t*>(meta_bytes + layout_.indices_offset);
  writable.labels = reinterpret_cast<int32_t*>(meta_bytes + layout_.labels_offset);
  writable.sample_kinds = meta_bytes + layout_.kinds_offset;
  std::memset(writable.sample_kinds, static_cast<int>(SampleKind::kPixels),
              layout_.geometry.batch_size);
  return writable;
}

double RingProducer::RequestedGpuDecodeShare() const {
  const RingHeader* header = reinterpret_cast<const RingHeader*>(base_);
  return ShareFromUnits(LoadAcquire(&header->requested_gpu_decode_share));
}

absl::Status RingProducer::Publish(const WritableSlot& slot, int64_t epoch, int64_t step,
                                   int32_t count, double gpu_decode_share) {
  if (next_publish_ == next_claim_ || slot.position != next_publish_ ||
      slot.slot != static_cast<int32_t>(slot.position % layout_.geometry.slot_count)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring position ", slot.position, " published out of order (next to publish: ",
                     next_publish_, ", claimed up to ", next_claim_, ")"));
  }
  if (count < 1 || count > layout_.geometry.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch count ", count, " is not in 1..", layout_.geometry.batch_size));
  }
  RingSlotMeta* meta = SlotMeta(base_, layout_, slot.slot);
  const uint8_t* kinds = reinterpret_cast<const uint8_t*>(meta) + layout_.kinds_offset;
  int32_t deferred = 0;
  for (int32_t i = 0; i < count; ++i) {
    if (kinds[i] == static_cast<uint8_t>(SampleKind::kDeferredJpeg)) {
      ++deferred;
    } else if (kinds[i] != static_cast<uint8_t>(SampleKind::kPixels)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", i, " of ring position ", slot.position, " has kind ",
                       static_cast<int>(kinds[i]), ", not a SampleKind"));
    }
  }
  meta->count = count;
  meta->deferred_count = deferred;
  meta->gpu_decode_share = ShareToUnits(gpu_decode_share);
  meta->epoch = epoch;
  meta->step = step;
  meta->position = slot.position;
  StoreRelease(&meta->state, PublishedState(slot.position));
  internal::FutexWakeAll(&meta->state);
  ++next_publish_;
  return absl::OkStatus();
}

absl::StatusOr<RingConsumer> RingConsumer::Attach(void* base, size_t bytes) {
  if (bytes < sizeof(RingHeader)) {
    return absl::DataLossError(absl::StrCat("ring mapping of ", bytes, " bytes has no header"));
  }
  RingHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (header.magic != kRingMagic) {
    return absl::DataLossError("shared-memory segment is not a Stoker ring (bad magic)");
  }
  if (header.version != kRingVersion || header.header_bytes != sizeof(RingHeader)) {
    return absl::DataLossError(absl::StrCat("ring version ", header.version, " (header ",
                                            header.header_bytes, " bytes); this build reads ",
                                            kRingVersion, " (", sizeof(RingHeader), ")"));
  }
  absl::StatusOr<RingLayout> layout =
      RingLayout::For(RingGeometry{header.slot_count, header.batch_size, header.image_size});
  if (!layout.ok()) {
    return absl::DataLossError(absl::StrCat("ring header: ", layout.status().message()));
  }
  if (header.slot_meta_offset != layout->slot_meta_offset ||
      header.slot_meta_stride != layout->slot_meta_stride ||
      header.image_offset != layout->image_offset || header.image_stride != layout->image_stride ||
      header.total_bytes != layout->total_bytes || bytes < layout->total_bytes) {
    return absl::DataLossError(absl::StrCat("ring header layout does not match its geometry or ",
                                            "the mapping (", bytes, " bytes)"));
  }
  return RingConsumer(static_cast<uint8_t*>(base), *layout);
}

absl::StatusOr<ReadableSlot> RingConsumer::Acquire(absl::Duration timeout) {
  const int32_t slot_count = layout_.geometry.slot_count;
  const uint64_t position = next_acquire_;
  const int32_t slot = static_cast<int32_t>(position % slot_count);
  if (held_[slot] != kNotHeld) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all ", slot_count, " ring slots are held: release one before acquiring another"));
  }
  RingSlotMeta* meta = SlotMeta(base_, layout_, slot);
  if (!internal::WaitForWord(&meta->state, PublishedState(position), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("no batch published in ring slot ", slot,
                                                    " within ", absl::FormatDuration(timeout)));
  }
  ReadableSlot readable;
  readable.slot = slot;
  readable.position = position;
  readable.epoch = meta->epoch;
  readable.step = meta->step;
  readable.count = meta->count;
  readable.deferred_count = meta->deferred_count;
  readable.gpu_decode_share = ShareFromUnits(meta->gpu_decode_share);
  if (meta->position != position || readable.count < 1 ||
      readable.count > layout_.geometry.batch_size || readable.deferred_count < 0 ||
      readable.deferred_count > readable.count) {
    return absl::DataLossError(absl::StrCat("ring slot ", slot, " metadata is inconsistent: count ",
                                            readable.count, ", position ", meta->position,
                                            " (expected ", position, ")"));
  }
  const uint8_t* meta_bytes = reinterpret_cast<const uint8_t*>(meta);
  readable.images = base_ + layout_.image_offset + layout_.image_stride * slot;
  readable.sample_indices = reinterpret_cast<const int64_t*>(meta_bytes + layout_.indices_offset);
  readable.labels = reinterpret_cast<const int32_t*>(meta_bytes + layout_.labels_offset);
  readable.sample_kinds = meta_bytes + layout_.kinds_offset;
  held_[slot] = position;
  ++next_acquire_;
  return readable;
}

void RingConsumer::RequestGpuDecodeShare(double share) {
  RingHeader* header = reinterpret_cast<RingHeader*>(base_);
  StoreRelease(&header->requested_gpu_decode_share, ShareToUnits(share));
}

absl::Status RingConsumer::Release(int32_t slot) {
  if (slot < 0 || slot >= layout_.geometry.slot_count || held_[slot] == kNotHeld) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring slot ", slot, " is not held (double release, or never acquired)"));
  }
  RingSlotMeta* meta = SlotMeta(base_, layout_, slot);
  StoreRelease(&meta->state, FreeState(held_[slot] + layout_.geometry.slot_count));
  internal::FutexWakeAll(&meta->state);
  held_[slot] = kNotHeld;
  return absl::OkStatus();
}

}  // namespace stoker::data_service
