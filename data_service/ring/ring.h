// The batch ring in shared memory: a header, per-slot metadata and per-slot image areas,
// written by one producer (the data service) and read by one consumer (a trainer rank).
// This file defines the layout (where the structs of data_service/ring/wire_types.h lie)
// and the two ends. Neither end owns memory: the mapping belongs to a SharedMemorySegment.
//
// Memory layout (all offsets from the ring base, which is page-aligned):
//   [0, 4096)                       RingHeader, then zeros
//   slot_meta_offset + i * stride   RingSlotMeta of slot i, then int64 sample_indices[batch],
//                                   then int32 labels[batch], then uint8 sample_kinds[batch]
//   image_offset + i * image_stride uint8 images of slot i: batch x S x S x 3 (NHWC, RGB);
//                                   every slot starts on a 4096-byte boundary; a sample of
//                                   kind kDeferredJpeg holds a DeferredSampleHeader and a
//                                   JPEG in its S x S x 3 bytes instead of pixels
#ifndef STOKER_DATA_SERVICE_RING_RING_H_
#define STOKER_DATA_SERVICE_RING_RING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data_service/ring/wire_types.h"

namespace stoker::data_service {

inline constexpr uint64_t kRingPageBytes = 4096;
inline constexpr int32_t kMaxSlotCount = 1024;
inline constexpr int32_t kMaxBatchSize = 1 << 16;
inline constexpr int32_t kMaxImageSize = 8192;

// The shape a ring is made for.
struct RingGeometry {
  int32_t slot_count = 0;
  int32_t batch_size = 0;
  int32_t image_size = 0;
};

// Where everything of a ring lies; a pure function of the geometry.
struct RingLayout {
  // InvalidArgument if a field is out of range (slot_count 1..1024, batch_size 1..65536,
  // image_size 1..8192) or the ring would not fit in 64-bit sizes.
  static absl::StatusOr<RingLayout> For(const RingGeometry& geometry);

  RingGeometry geometry;
  uint64_t slot_meta_offset = 0;
  uint64_t slot_meta_stride = 0;
  uint64_t indices_offset = 0;  // within a slot's metadata block
  uint64_t labels_offset = 0;   // within a slot's metadata block
  uint64_t kinds_offset = 0;    // within a slot's metadata block
  uint64_t image_offset = 0;
  uint64_t image_stride = 0;
  uint64_t batch_image_bytes = 0;  // batch_size * S * S * 3
  uint64_t total_bytes = 0;
};

// A claimed slot that the producer fills before publishing it.
struct WritableSlot {
  int32_t slot = -1;
  uint64_t position = 0;
  uint8_t* images = nullptr;
  int32_t* labels = nullptr;
  int64_t* sample_indices = nullptr;
  uint8_t* sample_kinds = nullptr;  // SampleKind; Claim() sets every entry to kPixels
};

// A published slot that the consumer reads until it releases it.
struct ReadableSlot {
  int32_t slot = -1;
  uint64_t position = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int32_t count = 0;
  const uint8_t* images = nullptr;
  const int32_t* labels = nullptr;
  const int64_t* sample_indices = nullptr;
  const uint8_t* sample_kinds = nullptr;  // SampleKind of each of the `count` samples
  int32_t deferred_count = 0;             // how many of them are kDeferredJpeg
  double gpu_decode_share = 0.0;          // the share the batch was produced with
};

// Note [The requested GPU decode share]
// Only the trainer knows whether it decodes JPEGs on a GPU, and how much of that pays
// (trainer/input/decode_share_controller.h), so the consumer asks for a share of each
// batch through one word of the ring's header, RingHeader::requested_gpu_decode_share,
// which it may rewrite at any time (one atomic store, release). The producer reads it
// (acquire) once when it starts a batch and uses that value for the whole batch, so a
// change takes effect at a batch boundary, never inside a batch; batches already being
// produced keep the share they started with. Each published slot records the share it
// was produced with (RingSlotMeta::gpu_decode_share), which the consumer can compare with
// its request: the service may fix the share instead (its --gpu_decode_share=F).

// The writing end of a ring. Owned by one thread (the service's production thread for
// the rank). Several slots may be claimed at once; they are published in claim order.
//
//   ASSIGN_OR_RETURN(RingProducer p, RingProducer::Initialize(seg.data(), seg.size(), g));
//   ASSIGN_OR_RETURN(WritableSlot s, p.Claim(absl::Seconds(1)));
//   ...fill s.images / s.labels / s.sample_indices...;  p.Publish(s, epoch, step, count);
class RingProducer {
 public:
  // Writes the header into `base` (page-aligned, `bytes` >= the layout's total_bytes) and
  // marks every slot free. Call before any consumer attaches.
  static absl::StatusOr<RingProducer> Initialize(void* base, size_t bytes,
                                                 const RingGeometry& geometry);

  // Waits until the slot for the next position has been released by the consumer (at most
  // `timeout`; zero means "only check") and claims it. DeadlineExceeded if it stays busy.
  absl::StatusOr<WritableSlot> Claim(absl::Duration timeout);

  // Publishes the oldest claimed slot, which must be `slot`: its contents become visible
  // to the consumer with release ordering. `count` in 1..batch_size; `gpu_decode_share`
  // (in [0, 1]) is the share the batch was produced with.
  absl::Status Publish(const WritableSlot& slot, int64_t epoch, int64_t step, int32_t count,
                       double gpu_decode_share = 0.0);

  // The share the consumer asks for now (Note [The requested GPU decode share]).
  double RequestedGpuDecodeShare() const;

  // Claimed and not yet published slots.
  int64_t claimed() const { return static_cast<int64_t>(next_claim_ - next_publish_); }
  const RingLayout& layout() const { return layout_; }

 private:
  RingProducer(uint8_t* base, const RingLayout& layout) : base_(base), layout_(layout) {}

  uint8_t* base_;
  RingLayout layout_;
  uint64_t next_claim_ = 0;
  uint64_t next_publish_ = 0;
};

// The reading end of a ring. Owned by one thread (the trainer's). Several slots may be
// held at once; they are acquired in position order and may be released in any order.
class RingConsumer {
 public:
  // Checks the header that the producer wrote into `base` (magic, version, geometry and
  // that the layout fits in `bytes`). DataLoss if it is not a valid ring.
  static absl::StatusOr<RingConsumer> Attach(void* base, size_t bytes);

  // Waits at most `timeout` (zero: only check) for the next position to be published.
  // DeadlineExceeded if it is not; DataLoss if its metadata is inconsistent.
  absl::StatusOr<ReadableSlot> Acquire(absl::Duration timeout);

  // Gives `slot` back to the producer. FailedPrecondition if it is not held.
  absl::Status Release(int32_t slot);

  // Asks the producer for `share` (clamped to [0, 1]) from the next batch it starts on
  // (Note [The requested GPU decode share]). Unlike the rest of this class, callable from
  // any thread: it is one atomic store into the header.
  void RequestGpuDecodeShare(double share);

  const RingLayout& layout() const { return layout_; }

 private:
  RingConsumer(uint8_t* base, const RingLayout& layout)
      : base_(base), layout_(layout), held_(layout.geometry.slot_count, kNotHeld) {}
  static constexpr uint64_t kNotHeld = ~uint64_t{0};

  uint8_t* base_;
  RingLayout layout_;
  uint64_t next_acquire_ = 0;
  std::vector<uint64_t> held_;  // per slot: the position held, or kNotHeld
};

namespace internal {

// Futex waits on a 32-bit word in shared memory. See Note [Futex words in shared memory].
// Sleeps while *word == expected, at most `timeout`; may return early (wake, signal).
void FutexWait(uint32_t* word, uint32_t expected, absl::Duration timeout);
// Wakes every waiter on `word`, in any process.
void FutexWakeAll(uint32_t* word);
// Waits until *word == target; false if `timeout` passes first.
bool WaitForWord(uint32_t* word, uint32_t target, absl::Duration timeout);

}  // namespace internal
}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_RING_RING_H_
