// Antialiased bilinear resampling of 8-bit RGB, Pillow's way: the triangle filter's
// support grows with the downscale factor (Pillow's and torchvision's antialias=True
// resize), the weights are computed in double exactly as Pillow's precompute_coeffs does,
// and the two separable passes round to 8 bits in between, as Pillow's ImagingResample
// does.
//
// Both passes run as "column" passes, the form compilers vectorise: every output row is
// a weighted sum of whole source rows. The vertical pass runs first and writes its rows
// transposed, so that the horizontal pass is a column pass too; it writes its rows
// transposed back into the destination (mirrored for a horizontal flip). Transposed
// writes go a block of rows at a time (Note [Blocked transposed writes] in resample.cc).
//
// Note [Fixed-point weights]
// Pillow applies 22-bit int32 weights. Here they are int16 with up to 15 fractional bits,
// so the multiplies are 16-bit ones, about 2.5x faster in the vectorised loops (SSE2);
// the weights' rounding moves a sum by at most taps * 255 * 2^-15 (0.03 of a level for
// 3 taps), which changes the rounded 8-bit result of a few pixels by one level.
//
// Note [Pillow pass order]
// Pillow runs the horizontal pass first, except that Pillow 13 runs the vertical pass
// first for some size combinations. The 8-bit intermediate rounds differently in the two
// orders, which can move single pixels by one more level.
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

  bool operator==(const AxisMap& o) const {
    return in0 == o.in0 && scale == o.scale && out_offset == o.out_offset &&
           out_size == o.out_size && clip_begin == o.clip_begin && clip_end == o.clip_end;
  }
};

// The same mapping expressed on a copy of the source scaled by num/denom (a JPEG decoded
// with DCT scaling, `scaled_size` = ceil(size * num / denom) pixels). Scaled pixel i
// covers source [i * denom / num, (i + 1) * denom / num).
AxisMap ScaleAxisMap(const AxisMap& map, int num, int denom, int scaled_size);

// Fixed-point filter taps of one axis: Pillow's precompute_coeffs, rounded to int16 fixed
// point (Note [Fixed-point weights]), with every output pixel given the same number of
// taps (the most any of them has non-zero weights for; the others weigh 0) so the inner
// loops have a fixed trip count. Reused between images: Plan() keeps the capacity.
class AxisTaps {
 public:
  static constexpr int kPrecisionBits = 15;  // at most; fewer when a weight is near 1

  // Computes the taps for `map` (nothing to do when it is the map of the last Plan():
  // images of one size get the same evaluation taps). Requires map.out_size > 0 and
  // clip_begin < clip_end.
  void Plan(const AxisMap& map);

  int out_size() const { return out_size_; }
  int taps() const { return taps_; }
  // Source pixels read: [source_begin(), source_end()), absolute source coordinates.
  int source_begin() const { return source_begin_; }
  int source_end() const { return source_end_; }
  int source_size() const { return source_end_ - source_begin_; }
  // First source pixel of output k, relative to source_begin().
  const int32_t* first() const { return first_.data(); }
  // taps() weights of output k start at weights() + k * taps(); they sum to
  // ~2^precision_bits().
  const int16_t* weights() const { return weights_.data(); }
  int precision_bits() const { return precision_bits_; }

  size_t capacity_bytes() const;

 private:
  int out_size_ = 0;
  int taps_ = 0;
  int source_begin_ = 0;
  int source_end_ = 0;
  int precision_bits_ = kPrecisionBits;
  bool planned_ = false;
  AxisMap planned_map_;
  std::vector<int32_t> first_;
  std::vector<int16_t> weights_;
  std::vector<double> scratch_;  // double-precision weights before rounding
  std::vector<int32_t> counts_;  // non-zero taps per output pixel
};

// Resamples a source region streamed in row by row, straight into the destination. The
// region is the h.source_size() x v.source_size() pixels starting at source pixel
// (h.source_begin(), v.source_begin()); the result is v.out_size() rows of h.out_size()
// RGB pixels, mirrored left-right when asked (a horizontal flip of the result). Source
// rows are not copied: each must stay valid until rows_kept() more rows have been added
// (ImageDecoder::Decode's keep_rows). The vertically resampled image is kept (stored
// transposed). Buffers grow to the largest image seen and are then reused.
// Not thread-safe: one per worker thread.
//
//   resampler.Start(h, v, /*mirror=*/false);
//   for (each source row of the region, top to bottom) resampler.AddRow(rgb);
//   resampler.Finish(dst, dst_stride);
class RgbResampler {
 public:
  // Begins a region; `h` and `v` must stay alive until Finish() returns.
  void Start(const AxisTaps& h, const AxisTaps& v, bool mirror);

  // The next source row: h.source_size() RGB pixels, valid until rows_kept() more rows
  // have been added. Exactly v.source_size() calls.
  void AddRow(const uint8_t* rgb);

  // How many rows after a row AddRow() may still read it: v.taps() - 1 (after Start()).
  int rows_kept() const { return v_ == nullptr ? 0 : v_->taps() - 1; }

  // Writes the result, rows `dst_stride` bytes apart.
  void Finish(uint8_t* dst, ptrdiff_t dst_stride);

  size_t capacity_bytes() const;

 private:
  static constexpr int kBlockRows = 8;    // rows per transposed write
  static constexpr int kBlockSlack = 32;  // readable bytes after each block row

  // Writes the vertical pass's pending block rows into transposed_.
  void FlushVerticalBlock();

  const AxisTaps* h_ = nullptr;
  const AxisTaps* v_ = nullptr;
  bool mirror_ = false;
  int rows_received_ = 0;
  int next_output_ = 0;
  std::vector<const uint8_t*> window_;  // the last v.taps() source rows, a ring
  std::vector<uint8_t> transposed_;     // vertical pass output, one row per source column
  std::vector<uint8_t> block_;          // kBlockRows output rows of either pass, each with
                                        // kBlockSlack bytes of slack, block_stride_ apart
  size_t block_stride_ = 0;
  int block_rows_ = 0;  // vertical pass rows waiting in block_
  std::vector<const uint8_t*> pointers_;
};

// Whole-image convenience for tests and tools (it allocates): resamples the `width` x
// `height` RGB image `src` per `x` and `y` into `dst` (x.out_size * y.out_size * 3 bytes).
void ResampleImageRgb(const uint8_t* src, int width, int height, const AxisMap& x, const AxisMap& y,
                      bool mirror, uint8_t* dst);

namespace internal {

// The column pass (one output row: n bytes of sum_t rows[t][x] * weights[t], rounded by
// `bits`) in its baseline or AVX2 form (Note [AVX2 column passes] in resample.cc), for
// tests that check the two agree. avx2 requires ColumnPassHasAvx2().
bool ColumnPassHasAvx2();
void ColumnPassForTesting(bool avx2, const uint8_t* const* rows, const int16_t* weights, int taps,
                          int bits, int n, uint8_t* dst);

}  // namespace internal
}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_RESAMPLE_H_
