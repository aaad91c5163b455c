// Deferred JPEG samples: which JPEGs a GPU's hardware JPEG decoder can take, and the
// DeferredSampleHeader (data_service/ring/wire_types.h) that carries a sample's geometry,
// chosen here exactly as the CPU path chooses it, to the trainer that decodes it.
//
// Note [Deferred samples]
// With --gpu_decode_share=f > 0 the data service leaves the decode of about a fraction f
// of each batch's samples to the trainer, whose GPU has hardware JPEG engines: for such a
// sample it writes, into the sample's S x S x 3 bytes of the ring slot, a
// DeferredSampleHeader and the JPEG file's bytes, and marks the sample kDeferredJpeg. The
// header's geometry is PlanSampleGeometry()'s for the same (seed, epoch, index), so the
// crop and flip are those the CPU path would have drawn, and batches stay a pure function
// of seed, epoch and index whatever the thread count. The trainer decodes the JPEG at full
// size and applies the same antialiased bilinear resample of the crop; its pixels differ
// from the CPU path's only by the decoders' reconstruction (and the resampler's rounding).
// A sample is deferred only when ParseJpegFrame() finds a single-scan baseline YCbCr JPEG
// with 4:4:4, 4:2:2 or 4:2:0 chroma that ends in EOI, within the pixel limit, whose bytes
// fit its place; every other image (progressive, CMYK, grayscale, odd sampling, PNG,
// truncated or unparsable) takes the CPU path, where a bad file is found and handled.
#ifndef STOKER_DATA_SERVICE_IMAGE_DEFERRED_JPEG_H_
#define STOKER_DATA_SERVICE_IMAGE_DEFERRED_JPEG_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data_service/image/sample_rng.h"
#include "data_service/image/transforms.h"
#include "data_service/ring/wire_types.h"

namespace stoker::data_service::image {

// What the markers of a JPEG say, as far as a hardware decoder cares.
struct JpegFrameInfo {
  int width = 0;
  int height = 0;
  // Whether the hardware decoder takes it (Note [Deferred samples]); if not, `why_not`
  // says why in a few words.
  bool hardware_decodable = false;
  absl::string_view why_not;
};

// Walks the markers of `bytes` (SOI, segments, the entropy-coded scan, EOI) without
// decoding anything. Never fails: bytes that are not a well-formed JPEG give
// hardware_decodable false.
JpegFrameInfo ParseJpegFrame(absl::Span<const uint8_t> bytes);

// Images of more pixels stay on the CPU: the trainer decodes a deferred JPEG at full size
// into GPU memory (48 MiB of RGB at this size).
inline constexpr int64_t kMaxDeferredPixels = int64_t{4096} * 4096;

// Note [The GPU decode arena]
// The trainer decodes a batch's deferred JPEGs at full size into one device buffer, its
// arena, before cropping them into the batch. The arena has a bound, the trainer's
// --gpu_decode_arena_mib (reported when the trainer starts), sent to the service in the
// RingRequest (gpu_decode_arena_bytes): a JPEG whose decoded size
// (DeferredDecodedBytes(), from its frame header) is larger is not deferred but decoded
// here, on the CPU path, so a dataset of huge images costs the GPU no more than the
// bound. The trainer decodes a batch whose deferred images together need more than the
// bound in several rounds, each within it, and the ring client refuses a slot whose
// deferred header names an image above it.

// The header of sample `key`'s deferred form, or nullopt when the sample stays on the
// CPU: not hardware-decodable, more than spec.decode.max_pixels or kMaxDeferredPixels
// pixels, a decoded size above `arena_bytes` (Note [The GPU decode arena]), or its bytes
// do not fit `capacity` (the sample's place, S * S * 3) after the header. `spec` must be
// valid. `why_not`, when given, receives the reason for nullopt.
std::optional<DeferredSampleHeader> PlanDeferredJpeg(
    absl::Span<const uint8_t> bytes, const TransformSpec& spec, const SampleKey& key,
    size_t capacity, absl::string_view* why_not = nullptr,
    uint64_t arena_bytes = kDefaultGpuDecodeArenaBytes);

// Writes `header` and then `bytes` (header.encoded_bytes of them) to `dst`.
void WriteDeferredSample(const DeferredSampleHeader& header, absl::Span<const uint8_t> bytes,
                         uint8_t* dst);

// The DeferredAxis form of an AxisMap, and back.
DeferredAxis ToDeferredAxis(const AxisMap& map);
AxisMap FromDeferredAxis(const DeferredAxis& axis);

}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_DEFERRED_JPEG_H_
