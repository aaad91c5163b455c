// JPEG marker walk for hardware decodability, and the deferred sample's header.
#include "data_service/image/deferred_jpeg.h"

#include <cstring>

namespace stoker::data_service::image {
namespace {

uint16_t ReadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

JpegFrameInfo NotDecodable(JpegFrameInfo info, absl::string_view why) {
  info.hardware_decodable = false;
  info.why_not = why;
  return info;
}

// The offset of the first marker after the entropy-coded data that starts at `pos`: an
// 0xFF followed by neither 0x00 (a stuffed byte), a restart marker nor another 0xFF.
// `bytes.size()` when there is none.
size_t SkipEntropyCodedData(absl::Span<const uint8_t> bytes, size_t pos) {
  const uint8_t* const data = bytes.data();
  const size_t n = bytes.size();
  while (pos + 1 < n) {
    const void* ff = std::memchr(data + pos, 0xFF, n - pos - 1);
    if (ff == nullptr) return n;
    pos = static_cast<size_t>(static_cast<const uint8_t*>(ff) - data);
    const uint8_t next = data[pos + 1];
    if (next == 0x00 || (next >= 0xD0 && next <= 0xD7) || next == 0xFF) {
      pos += 1;
      continue;
    }
    return pos;
  }
  return n;
}

}  // namespace

JpegFrameInfo ParseJpegFrame(absl::Span<const uint8_t> bytes) {
  JpegFrameInfo info;
  const size_t n = bytes.size();
  const uint8_t* const data = bytes.data();
  if (n < 4 || data[0] != 0xFF || data[1] != 0xD8) return NotDecodable(info, "not a JPEG");
  bool have_frame = false;
  bool have_scan = false;
  size_t pos = 2;
  while (true) {
    // Fill bytes (0xFF) may precede a marker.
    while (pos < n && data[pos] == 0xFF && pos + 1 < n && data[pos + 1] == 0xFF) ++pos;
    if (pos + 1 >= n || data[pos] != 0xFF) return NotDecodable(info, "truncated or malformed");
    const uint8_t marker = data[pos + 1];
    pos += 2;
    if (marker == 0xD9) {  // EOI
      if (!have_frame || !have_scan) return NotDecodable(info, "no frame or no scan");
      info.hardware_decodable = true;
      return info;
    }
    if (have_scan) return NotDecodable(info, "more than one scan");
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // no length
    if (pos + 2 > n) return NotDecodable(info, "truncated or malformed");
    const size_t length = ReadU16(data + pos);
    if (length < 2 || pos + length > n) return NotDecodable(info, "truncated or malformed");
    const uint8_t* segment = data + pos + 2;
    const size_t segment_bytes = length - 2;
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      if (marker != 0xC0) return NotDecodable(info, "not baseline (progressive, lossless...)");
      if (have_frame || segment_bytes < 6) return NotDecodable(info, "malformed frame header");
      const int precision = segment[0];
      info.height = ReadU16(segment + 1);
      info.width = ReadU16(segment + 3);
      const int components = segment[5];
      if (precision != 8) return NotDecodable(info, "not 8-bit");
      if (info.width == 0 || info.height == 0) return NotDecodable(info, "no size in header");
      if (components != 3) return NotDecodable(info, "not three components (grayscale, CMYK)");
      if (segment_bytes < 6 + 3 * 3) return NotDecodable(info, "malformed frame header");
      const int luma = segment[6 + 1];
      const int h = luma >> 4;
      const int v = luma & 15;
      if (!((h == 1 && v == 1) || (h == 2 && v == 1) || (h == 2 && v == 2))) {
        return NotDecodable(info, "chroma sampling other than 4:4:4, 4:2:2, 4:2:0");
      }
      if (segment[6 + 3 + 1] != 0x11 || segment[6 + 6 + 1] != 0x11) {
        return NotDecodable(info, "chroma sampling other than 4:4:4, 4:2:2, 4:2:0");
      }
      have_frame = true;
    } else if (marker == 0xEE && segment_bytes >= 12 && std::memcmp(segment, "Adobe", 5) == 0 &&
               segment[11] != 1) {
      return NotDecodable(info, "Adobe colour transform other than YCbCr");
    }
    pos += length;
    if (marker == 0xDA) {  // SOS: the entropy-coded data follows
      if (!have_frame) return NotDecodable(info, "scan before frame");
      have_scan = true;
      pos = SkipEntropyCodedData(bytes, pos);
    }
  }
}

// DeferredAxis has no padding (its size is asserted), so every byte is set.
DeferredAxis ToDeferredAxis(const AxisMap& map) {
  return DeferredAxis{map.in0,      map.scale,      map.out_offset,
                      map.out_size, map.clip_begin, map.clip_end};
}

AxisMap FromDeferredAxis(const DeferredAxis& axis) {
  return AxisMap{axis.in0,      axis.scale,      axis.out_offset,
                 axis.out_size, axis.clip_begin, axis.clip_end};
}

std::optional<DeferredSampleHeader> PlanDeferredJpeg(absl::Span<const uint8_t> bytes,
                                                     const TransformSpec& spec,
                                                     const SampleKey& key, size_t capacity,
                                                     absl::string_view* why_not,
                                                     uint64_t arena_bytes) {
  auto refuse = [&](absl::string_view why) -> std::optional<DeferredSampleHeader> {
    if (why_not != nullptr) *why_not = why;
    return std::nullopt;
  };
  if (capacity < sizeof(DeferredSampleHeader) ||
      bytes.size() > capacity - sizeof(DeferredSampleHeader)) {
    return refuse("larger than the sample's place in the slot");
  }
  const JpegFrameInfo info = ParseJpegFrame(bytes);
  if (!info.hardware_decodable) return refuse(info.why_not);
  const int64_t pixels = static_cast<int64_t>(info.width) * info.height;
  if (pixels > spec.decode.max_pixels) return refuse("more pixels than the limit");
  if (pixels > kMaxDeferredPixels) return refuse("more pixels than the GPU path takes");
  if (DeferredDecodedBytes(info.width, info.height) > arena_bytes) {
    return refuse("larger, decoded, than the trainer's GPU decode arena");
  }
  absl::StatusOr<SampleGeometry> geometry = PlanSampleGeometry(info.width, info.height, spec, &key);
  if (!geometry.ok()) return refuse("no geometry");
  DeferredSampleHeader header;
  std::memset(&header, 0, sizeof(header));
  header.magic = kDeferredMagic;
  header.version = kDeferredVersion;
  header.encoded_bytes = static_cast<uint32_t>(bytes.size());
  header.width = info.width;
  header.height = info.height;
  header.flip = geometry->flip ? 1 : 0;
  header.train = spec.mode == TransformMode::kTrain ? 1 : 0;
  header.x = ToDeferredAxis(geometry->x);
  header.y = ToDeferredAxis(geometry->y);
  return header;
}

void WriteDeferredSample(const DeferredSampleHeader& header, absl::Span<const uint8_t> bytes,
                         uint8_t* dst) {
  std::memcpy(dst, &header, sizeof(header));
  std::memcpy(dst + sizeof(header), bytes.data(), header.encoded_bytes);
}

}  // namespace stoker::data_service::image
