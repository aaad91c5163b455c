// Decoding of JPEG (libjpeg-turbo) and PNG (libpng) bytes into 8-bit RGB rows. The format
// comes from the bytes' magic numbers, never from a file name. JPEGs can be decoded with
// DCT-domain downscaling and only the rows and columns a caller needs; PNGs at full size.
// Grayscale, CMYK/YCCK, palette, 16-bit and alpha images all come out as RGB the way
// Pillow's `Image.open(f).convert("RGB")` makes them (alpha is dropped, not composited).
// Every failure, including any malformed input, is an absl::Status: DecodeImage() is the
// fuzzable entry point.
#ifndef STOKER_DATA_SERVICE_IMAGE_DECODE_H_
#define STOKER_DATA_SERVICE_IMAGE_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stoker::data_service::image {
namespace internal {
class JpegHuffmanDecoder;
struct JpegState;
struct PngState;
}  // namespace internal

enum class ImageFormat { kJpeg, kPng };

absl::string_view ImageFormatName(ImageFormat format);

// Pillow raises DecompressionBombError above 2 * Image.MAX_IMAGE_PIXELS pixels; Stoker's
// default limit is the same, so it accepts exactly the sizes torchvision's loader accepts.
inline constexpr int64_t kDefaultMaxPixels = 2 * int64_t{89478485};

// Which DCT-domain scales a JPEG may be decoded at (Note [Choice of DCT scales]).
enum class DctScaling {
  kNone,        // always 1/1
  kPowerOfTwo,  // 1/1, 1/2, 1/4, 1/8: those libjpeg-turbo decodes with SIMD
  kAll,         // every factor of tjGetScalingFactors() up to 1: n/8, n = 1..8
};

// Note [Choice of DCT scales]
// The transform decodes a JPEG at the smallest offered scale whose image still covers
// the output's resolution (ChooseScale), so nothing the output can show is lost. Which
// scales to offer is a speed question. libjpeg-turbo 2.1 has SIMD inverse DCTs for the
// 8x8, 4x4 and 2x2 (and trivial 1x1) block sizes only; the 7/8, 3/4, 5/8 and 3/8 scales
// run plain-C 7x7/6x6/5x5/3x3 IDCTs for luma and 14x14/12x12/10x10/6x6 ones for 4:2:0
// chroma, which can cost more than decoding at the next power of two up and resampling
// more pixels. bench_vs_torchvision.py, one thread, images per CPU-second:
//   500x375 JPEGs, eval:  kPowerOfTwo (1/1) 966, kAll (3/4) 758, kNone 971
//   1024x768 JPEGs, eval: kPowerOfTwo (1/2) 424, kAll (3/8) 414, kNone 316
// kPowerOfTwo is never slower, so it is the default; kAll and kNone stay available.

// Note [Fast JPEG reconstruction]
// Pillow decodes JPEGs with libjpeg's defaults: the accurate integer IDCT (JDCT_ISLOW)
// and "fancy" chroma upsampling (a triangle filter between chroma samples). The fast
// integer IDCT (JDCT_IFAST) and upsampling by replication, which libjpeg-turbo fuses with
// the colour conversion ("merged upsampling", SIMD) and which needs no crop margin
// (Note [Crop margin] in decode.cc), cost less. Entropy decoding, which neither changes,
// is about two thirds of a 57 KB 500x375 JPEG's decode (Stoker's own Huffman decoder,
// jpeg_huffman.h, takes some of it off), so the gain is bounded:
// transforms_benchmark, one thread of the H200 host's Xeon, ANCHORS-like 500x375
// quality-90 JPEGs, CPU microseconds per image (median of 3 interleaved rounds):
//   evaluation: accurate (ISLOW + fancy) 975, fast (IFAST + replication) 879;
//   the decode alone (same region) 868 and 756, of which entropy decoding is ~600.
// Scaled IDCTs (n/8) do not pay here: decoding the same region at 6/8 costs ~30% more
// than at 1/1 (their IDCTs are plain C), so kPowerOfTwo stays the default.
// The pixels move away from Pillow's: on those JPEGs a full-size decode is 45.4 dB
// (IFAST alone), 41.4 dB (replication alone) and 40.2 dB (both) from the accurate one,
// and the transformed samples stay >= 35 dB from torchvision's on every test image
// (evaluation on the 500x375 test JPEG: 43.2 dB, against 57.8 dB with Pillow's
// reconstruction; transforms_test prints both). The sample transforms use the fast
// reconstruction (TransformSpec's default); DecodeImage() and a default DecodeOptions
// keep Pillow's.
struct DecodeOptions {
  // Largest width * height accepted. Checked from the header, before any pixel data is
  // decoded or any image-sized buffer allocated.
  int64_t max_pixels = kDefaultMaxPixels;
  DctScaling dct_scaling = DctScaling::kPowerOfTwo;
  // JPEG pixel reconstruction (Note [Fast JPEG reconstruction]): the fast integer IDCT
  // (JDCT_IFAST) instead of the accurate one (JDCT_ISLOW, Pillow's), and chroma
  // upsampling by replication (merged with the colour conversion) instead of Pillow's
  // triangle ("fancy") upsampling.
  bool fast_idct = false;
  bool fancy_upsampling = true;
  // Baseline JPEGs' Huffman decoding by Stoker's decoder instead of libjpeg-turbo's: the
  // same pixels, faster (Note [Replacing libjpeg's entropy decoder] in jpeg_huffman.cc).
  // Off only to compare the two.
  bool fast_huffman = true;
};

// DecodeOptions with fast_idct on and fancy_upsampling off: the sample transforms'
// default (Note [Fast JPEG reconstruction]).
inline DecodeOptions FastDecodeOptions() {
  DecodeOptions options;
  options.fast_idct = true;
  options.fancy_upsampling = false;
  return options;
}

struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;
  int height = 0;
};

// A decode scale num/denom: the image comes out ceil(size * num / denom) pixels wide/high.
struct ScaleFactor {
  int num = 1;
  int denom = 1;

  int Apply(int size) const {
    return static_cast<int>((static_cast<int64_t>(size) * num + denom - 1) / denom);
  }
  bool operator==(const ScaleFactor& o) const { return num == o.num && denom == o.denom; }
  bool operator!=(const ScaleFactor& o) const { return !(*this == o); }
};

// The smallest factor in `factors` (sorted largest first, the first being 1/1) that keeps
// a source extent at least as large as its target in both axes:
// source_width * s >= target_width and source_height * s >= target_height. So the
// resampler after it only ever shrinks, and no detail the output can show is lost.
ScaleFactor ChooseScale(absl::Span<const ScaleFactor> factors, int64_t source_width,
                        int64_t target_width, int64_t source_height, int64_t target_height);

// Pixel rectangle [x, x + width) x [y, y + height).
struct PixelRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// Detects the format from the magic numbers. InvalidArgument for an empty input or for
// anything but JPEG and PNG (naming what it looks like when it is a known other format).
absl::StatusOr<ImageFormat> DetectImageFormat(absl::Span<const uint8_t> bytes);

// A reusable two-step decoder: ReadHeader() parses the header and checks the limits, then
// Decode() streams the rows of a region, optionally DCT-scaled, to a callback. The library
// state (libjpeg decompressor) and the row buffers are kept between images, so decoding
// many images does no allocation of Stoker's own once the buffers have grown; libjpeg
// and libpng still allocate their per-image working memory internally.
// Not thread-safe: one per worker thread (TransformScratch owns one).
//
//   ImageDecoder decoder;
//   ASSIGN_OR_RETURN(ImageHeader header, decoder.ReadHeader(bytes, options));
//   ScaleFactor s = ChooseScale(decoder.scale_factors(), ...);
//   RETURN_IF_ERROR(decoder.Decode(s, region, [&](int y, const uint8_t* rgb) { ... }));
class ImageDecoder {
 public:
  // Receives row `y` (in the scaled image) of the region: region.width RGB pixels, valid
  // only during the call. Rows arrive in increasing order.
  using RowSink = absl::FunctionRef<void(int y, const uint8_t* rgb)>;

  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Parses the header of `bytes`, which must stay alive and unchanged until Decode()
  // returns. InvalidArgument for a malformed header, an unsupported kind of image, or
  // one larger than options.max_pixels.
  absl::StatusOr<ImageHeader> ReadHeader(absl::Span<const uint8_t> bytes,
                                         const DecodeOptions& options);

  // Scales available for the image of the last ReadHeader(), largest (1/1) first: for a
  // JPEG those of tjGetScalingFactors() that are <= 1 and allowed by
  // DecodeOptions::dct_scaling, else 1/1.
  absl::Span<const ScaleFactor> scale_factors() const;

  // Decodes `region` of the image scaled by `scale` (one of scale_factors()) and hands
  // each of its rows to `sink`. Only the rows and columns the region needs are
  // reconstructed where the format allows (JPEG). A row's pointer stays valid until
  // `keep_rows` more rows have been handed over (so a consumer that needs the last few
  // rows need not copy them; 0: only during the call). Must follow a successful
  // ReadHeader(); one Decode() per ReadHeader(). InvalidArgument for corrupt or truncated
  // data (Note [JPEG warnings]), FailedPrecondition for a call out of order.
  absl::Status Decode(ScaleFactor scale, const PixelRect& region, RowSink sink, int keep_rows = 0);

  // Bytes held in Stoker's own reusable buffers (not libjpeg's or libpng's internals).
  size_t capacity_bytes() const;

  // Frees those buffers (capacity_bytes() becomes 0); later decodes grow them again.
  void ReleaseBuffers();

 private:
  absl::Status DecodeJpeg(ScaleFactor scale, const PixelRect& region, RowSink sink, int keep_rows);
  absl::Status DecodePng(const PixelRect& region, RowSink sink, int keep_rows);

  std::unique_ptr<internal::JpegState> jpeg_;
  std::unique_ptr<internal::PngState> png_;
  ImageHeader header_;
  bool header_ready_ = false;
  DctScaling dct_scaling_ = DctScaling::kPowerOfTwo;
  bool fast_idct_ = false;
  bool fancy_upsampling_ = true;
  bool fast_huffman_ = true;
  std::unique_ptr<internal::JpegHuffmanDecoder> huffman_;  // kept: its tables are reused
  std::vector<uint8_t> rows_;     // decoder output rows (RGB, or CMYK before conversion),
                                  // a ring of batch + keep_rows rows
  std::vector<uint8_t> rgb_row_;  // converted RGB rows (CMYK JPEGs), a ring of keep_rows + 1
  std::vector<uint8_t*> row_pointers_;
};

// A whole image decoded at full size.
struct DecodedImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height rows of width * 3 bytes
};

// Decodes all of `bytes` at full size. The fuzzable entry point: any input either decodes
// or gives InvalidArgument with a message saying what is wrong (the caller adds the file
// name); none crashes.
absl::StatusOr<DecodedImage> DecodeImage(absl::Span<const uint8_t> bytes,
                                         const DecodeOptions& options = {});

}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_DECODE_H_
