// Antialiased bilinear resampling of 8-bit RGB with Pillow's arithmetic: the triangle
// filter's support grows with the downscale factor (Pillow's and torchvision's
// antialias=True resize), weights are computed in double, rounded to 22-bit fixed point,
// and applied in two separable passes (horizontal first, 8-bit intermediate, then
// vertical), as Pillow's ImagingResample does.
//
// Note [Pillow pass order]
// Up to Pillow 12 the horizontal pass always runs first, and given the same source pixels
// and mapping the output here is bit-identical to Pillow's. Pillow 13 runs the vertical
// pass first for some size combinations; its 8-bit intermediate then rounds differently
// and single pixels differ by one level. Stoker keeps horizontal-first: it lets decoded
// rows stream straight into the first pass, so no decoded image is ever stored.
#ifndef STOKER_DATA_SERVICE_IMAGE_RESAMPLE_H_
#define STOKER_DATA_SERVICE_IMAGE_RESAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::data_service::image {

// How the output pixels of one axis sample the source. Source pixel i covers [i, i+1).
// Output pixel k, 0 <= k < out_size, is centred at source coordinate
//   clip_begin + in0 + (k + out_offset + 0.5) * scale
// and its filter reads only source pixels in [clip_begin, clip_end), renormalised there.
// Pillow's `resize(size, box=(b0, ...))` of an image of n pixels is
//   {in0 = b0, scale = (b1 - b0) / size, out_offset = 0, clip = [0, n)};
// torchvision's crop-then-resize of [j, j + w) is {0, w / size, 0, size, [j, j + w)};
// resize to `resized` pixels then crop `out_size` from `left` is
//   {0, n / resized, left, out_size, [0, n)}.
struct AxisMap {
  double in0 = 0.0;
  double scale = 1.0;
  int out_offset = 0;
  int out_size = 0;
  int clip_begin = 0;
  int clip_end = 0;
};

// The same mapping expressed on a copy of the source scaled by num/denom (a JPEG decoded
// with DCT scaling, `scaled_size` = ceil(size * num / denom) pixels). Scaled pixel i
// covers source [i * denom / num, (i + 1) * denom / num).
AxisMap ScaleAxisMap(const AxisMap& map, int num, int denom, int scaled_size);

// Fixed-point filter taps of one axis, Pillow's precompute_coeffs + normalize_coeffs_8bpc,
// with every output pixel given the same tap count (unused taps weigh 0) so the inner
// loops have a fixed trip count. Reused between images: Plan() keeps the capacity.
class AxisTaps {
 public:
  static constexpr int kPrecisionBits = 22;  // Pillow's PRECISION_BITS for 8-bit images

  // Computes the taps for `map`. Requires map.out_size > 0 and clip_begin < clip_end.
  void Plan(const AxisMap& map);

  int out_size() const { return out_size_; }
  int taps() const { return taps_; }
  // Source pixels read: [source_begin(), source_end()), absolute source coordinates.
  int source_begin() const { return source_begin_; }
  int source_end() const { return source_end_; }
  // First source pixel of output k, relative to source_begin().
  const int32_t* first() const { return first_.data(); }
  // taps() weights of output k start at weights() + k * taps(); they sum to ~2^22.
  const int32_t* weights() const { return weights_.data(); }

  size_t capacity_bytes() const;

 private:
  int out_size_ = 0;
  int taps_ = 0;
  int source_begin_ = 0;
  int source_end_ = 0;
  std::vector<int32_t> first_;
  std::vector<int32_t> weights_;
  std::vector<double> scratch_;  // double-precision weights before rounding
};

// Horizontal pass of one RGB row: `src` points at source pixel h.source_begin() of the
// row; writes h.out_size() RGB pixels to `dst`, right to left when `mirror` is set (a
// horizontal flip of the result).
void ResampleRowRgb(const uint8_t* src, const AxisTaps& h, bool mirror, uint8_t* dst);

// Vertical pass: `src` holds the rows [v.source_begin(), v.source_end()) of an RGB image
// `width` pixels wide, `src_stride` bytes apart; writes v.out_size() rows to `dst`,
// `dst_stride` bytes apart.
void ResampleColumnsRgb(const uint8_t* src, ptrdiff_t src_stride, int width,
                        const AxisTaps& v, uint8_t* dst, ptrdiff_t dst_stride);

// Whole-image convenience over the two passes (tests and tools; it allocates): resamples
// the `width` x `height` RGB image `src` per `x` and `y` into `dst` (x.out_size *
// y.out_size * 3 bytes).
void ResampleRgb(const uint8_t* src, int width, int height, const AxisMap& x,
                 const AxisMap& y, bool mirror, uint8_t* dst);

}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_RESAMPLE_H_
