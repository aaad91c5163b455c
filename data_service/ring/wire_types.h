// The wire format between a trainer rank's RingClient and the data service: the ring's
// structs in shared memory (its header and per-slot metadata; the offsets they sit at are
// RingLayout's, data_service/ring/ring.h), the control socket's one packet type
// (data_service/ring/control_protocol.h), and the request and epoch records both ends
// exchange through it. Both programs are built from this one header. Every struct that
// crosses the process boundary is trivially copyable, has its size asserted, and is
// versioned (RingHeader::version covers the slot metadata too; ControlMessage::version);
// changing one means a new version number.
#ifndef STOKER_DATA_SERVICE_RING_WIRE_TYPES_H_
#define STOKER_DATA_SERVICE_RING_WIRE_TYPES_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace stoker::data_service {

// ---- The ring, in shared memory ----

inline constexpr uint64_t kRingMagic = 0x31474e49524b5453ULL;  // "STKRING1", little-endian
inline constexpr uint32_t kRingVersion = 3;

// A share of a batch's samples in [0, 1] as it crosses shared memory: millionths.
inline constexpr uint32_t kShareUnits = 1000000;
inline uint32_t ShareToUnits(double share) {
  if (!(share > 0.0)) return 0;  // NaN too
  return static_cast<uint32_t>(std::lround(std::clamp(share, 0.0, 1.0) * kShareUnits));
}
// Values above kShareUnits (memory another process wrote) read as 1.
inline double ShareFromUnits(uint32_t units) {
  return static_cast<double>(std::min(units, kShareUnits)) / kShareUnits;
}

// Header at offset 0 of a ring. Written once by the producer before any consumer maps it,
// except `requested_gpu_decode_share`, the one word the consumer writes (Note [The
// requested GPU decode share] in data_service/ring/ring.h).
struct RingHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;  // sizeof(RingHeader)
  int32_t slot_count;
  int32_t batch_size;
  int32_t image_size;
  int32_t reserved0;
  uint64_t slot_meta_offset;
  uint64_t slot_meta_stride;
  uint64_t image_offset;
  uint64_t image_stride;
  uint64_t total_bytes;
  // Written by the consumer (atomically, common/shm_atomic.h), read by the producer when it
  // starts each batch: the share of each batch, in kShareUnits, that the trainer asks to
  // decode itself. The producer initialises it to 0.
  uint32_t requested_gpu_decode_share;
  uint8_t reserved[52];
};
static_assert(std::is_trivially_copyable_v<RingHeader>);
static_assert(sizeof(RingHeader) == 128, "RingHeader is part of the shared-memory ABI");

// Metadata of one slot, followed in memory by sample_indices[batch], labels[batch] and
// sample_kinds[batch] (SampleKind).
// `state` is the slot's futex word (see Note [Ring slot states] in ring.cc); it is only
// accessed atomically, through common/shm_atomic.h.
struct RingSlotMeta {
  uint32_t state;
  int32_t count;  // samples in the batch, 1..batch_size
  int64_t epoch;
  int64_t step;            // batch index within the epoch
  uint64_t position;       // the ring position (0, 1, 2, ...) this slot was written for
  int32_t deferred_count;  // samples of kind kDeferredJpeg among the first `count`
  // The share (kShareUnits) of GPU decode positions the batch was produced with, whether
  // the consumer's request or the service's fixed --gpu_decode_share.
  uint32_t gpu_decode_share;
  uint8_t reserved[24];
};
static_assert(std::is_trivially_copyable_v<RingSlotMeta>);
static_assert(sizeof(RingSlotMeta) == 64, "RingSlotMeta is part of the shared-memory ABI");

// What sample i's place in a slot's images holds (its S x S x 3 bytes).
enum class SampleKind : uint8_t {
  // The finished uint8 HWC RGB sample.
  kPixels = 0,
  // A DeferredSampleHeader and, right after it, the sample's JPEG file: the consumer
  // decodes and transforms it (Note [Deferred samples] in data_service/image/deferred_jpeg.h).
  kDeferredJpeg = 1,
};

inline constexpr uint32_t kDeferredMagic = 0x4a444b53;  // "SKDJ", little-endian
inline constexpr uint32_t kDeferredVersion = 1;

// How the output pixels of one axis sample the full-size decoded image (the same
// contract as data_service/image/resample.h's AxisMap): output pixel k, 0 <= k <
// out_size, is centred at source coordinate clip_begin + in0 + (k + out_offset + 0.5) *
// scale, and its antialiased bilinear (triangle) filter, of support max(scale, 1), reads
// only source pixels in [clip_begin, clip_end), renormalised there.
struct DeferredAxis {
  double in0;
  double scale;
  int32_t out_offset;
  int32_t out_size;
  int32_t clip_begin;
  int32_t clip_end;
};
static_assert(std::is_trivially_copyable_v<DeferredAxis>);
static_assert(sizeof(DeferredAxis) == 32, "DeferredAxis is part of the shared-memory ABI");

// The start of a kDeferredJpeg sample's place in a slot: the transform that the data
// service chose (RandomResizedCrop box + flip, or Resize + CenterCrop, a pure function of
// seed, epoch and index as for pixel samples), followed by `encoded_bytes` bytes of JPEG.
struct DeferredSampleHeader {
  uint32_t magic;          // kDeferredMagic
  uint32_t version;        // kDeferredVersion
  uint32_t encoded_bytes;  // JPEG bytes after the header; <= S*S*3 - sizeof(header)
  int32_t width;           // the JPEG's full size
  int32_t height;
  uint8_t flip;   // mirror the output horizontally
  uint8_t train;  // 1: training crop, 0: evaluation resize + centre crop
  uint8_t reserved0[2];
  DeferredAxis x;
  DeferredAxis y;
  uint8_t reserved[40];
};
static_assert(std::is_trivially_copyable_v<DeferredSampleHeader>);
static_assert(sizeof(DeferredSampleHeader) == 128,
              "DeferredSampleHeader is part of the shared-memory ABI");

// The bytes a deferred JPEG of width x height pixels takes, decoded, in the trainer's GPU
// decode arena: RGB rows padded to 256 bytes. The service defers only images whose
// decoded size is at most the ring's RingRequest::gpu_decode_arena_bytes (Note [The GPU
// decode arena] in data_service/image/deferred_jpeg.h), and the client refuses a slot
// that holds a larger one.
inline constexpr uint64_t kDecodedRowAlignment = 256;
inline uint64_t DeferredDecodedBytes(int32_t width, int32_t height) {
  if (width <= 0 || height <= 0) return 0;
  const uint64_t row = (static_cast<uint64_t>(width) * 3 + kDecodedRowAlignment - 1) /
                       kDecodedRowAlignment * kDecodedRowAlignment;
  return row * static_cast<uint64_t>(height);
}

// The trainer's GPU decode arena when it does not say otherwise (--gpu_decode_arena_mib).
inline constexpr uint64_t kDefaultGpuDecodeArenaBytes = uint64_t{256} << 20;

// ---- The control socket ----

inline constexpr uint32_t kControlMagic = 0x4c435453;  // "STCL", little-endian
inline constexpr uint16_t kControlVersion = 3;
inline constexpr size_t kControlTextBytes = 256;

enum class MessageType : uint16_t {
  kRegister = 1,
  kRegistered = 2,
  kStartEpoch = 3,
  kEpochStarted = 4,
  kError = 5,
  kBadSample = 6,
  kBadSampleCounted = 7,
};

// One packet. Fields not used by a type are zero.
struct ControlMessage {
  uint32_t magic;
  uint16_t version;
  uint16_t type;        // MessageType
  uint32_t request_id;  // echoed by the reply; 0 in an asynchronous kError
  int32_t status_code;  // kError: an absl::StatusCode
  // kRegister (and echoed by kRegistered): the RingRequest.
  int32_t rank;
  int32_t world_size;
  int32_t batch_size;
  int32_t image_size;
  int32_t slot_count;
  uint8_t train;
  uint8_t drop_last;
  uint8_t reserved0[2];
  // kStartEpoch: epoch, seed, and in `samples` the epoch's start position: the samples of
  // its global order already trained (Note [The rest of an epoch] in
  // data_service/dataset/sampler.h). kEpochStarted: epoch, samples, batches. kRegistered:
  // in `samples`, the split's dataset size.
  int64_t epoch;
  uint64_t seed;
  int64_t samples;
  int64_t batches;
  // kRegistered: the size of the ring segment named in `text`.
  uint64_t ring_bytes;
  // kRegister (and echoed by kRegistered): RingRequest::num_classes.
  int32_t num_classes;
  uint8_t reserved1[4];
  // kRegister (and echoed by kRegistered): RingRequest::gpu_decode_arena_bytes.
  uint64_t gpu_decode_arena_bytes;
  // kBadSample: the dataset index of the sample the trainer could not decode (with
  // `epoch` and `text`, why).
  int64_t sample_index;
  // kRegistered: the shared-memory segment name. kError: the message. kBadSample: why the
  // sample is unusable. kBadSampleCounted: the sample's description (its file).
  // NUL-terminated.
  char text[kControlTextBytes];
};
static_assert(std::is_trivially_copyable_v<ControlMessage>);
static_assert(sizeof(ControlMessage) == 360, "ControlMessage is the wire format");

// ---- What the client asks for and is told ----

// What a trainer rank asks for when it registers with its node's data service.
struct RingRequest {
  int32_t rank = 0;        // global rank
  int32_t world_size = 1;  // global number of ranks: the sampler splits the dataset by it
  int32_t batch_size = 0;  // samples per batch for this rank
  int32_t image_size = 0;  // square output size in pixels (height == width)
  int32_t slot_count = 4;  // ring depth: batches that may be in flight
  bool train = true;       // training split and augmentation, or validation split
  bool drop_last = false;  // DistributedSampler's drop_last
  // The trainer's --num_classes: every label must be in [0, num_classes). The service
  // refuses a dataset with more classes (OutOfRange, naming both counts), and the client
  // checks every batch's labels. 0: not checked.
  int32_t num_classes = 0;
  // The share of each batch, in [0, 1], whose JPEGs this rank asks to decode on its GPU
  // (Note [Deferred samples] in data_service/image/deferred_jpeg.h). Not sent over the
  // socket: RingClient::Connect writes it into the ring's header before it returns, so it
  // holds from the first batch; RingClient::RequestGpuDecodeShare changes it later.
  double gpu_decode_share = 0.0;
  // The bound on this rank's GPU decode arena: the service defers only JPEGs whose
  // DeferredDecodedBytes() are at most this (Note [The GPU decode arena] in
  // data_service/image/deferred_jpeg.h); 0 reads as kDefaultGpuDecodeArenaBytes.
  uint64_t gpu_decode_arena_bytes = kDefaultGpuDecodeArenaBytes;
};

// One epoch as the service will deliver it to this rank: the whole epoch, or its rest
// from the start position StartEpoch named.
struct EpochInfo {
  int64_t epoch = 0;
  int64_t samples = 0;  // samples this rank sees (the sampler's num_samples for a whole epoch)
  int64_t batches = 0;  // ceil(samples / batch_size); only the last batch may be short
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_RING_WIRE_TYPES_H_
