// Pillow-style antialiased bilinear resampling as two vectorised column passes: fixed tap
// counts let the compiler unroll the tap loop and vectorise across the row.
#include "data_service/image/resample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace stoker::data_service::image {
namespace {

// Pillow's bilinear_filter: the triangle of support 1.
inline double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t Clip8(int32_t v) {
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One output row of a column pass: n bytes, each the weighted sum down the kTaps source
// rows rows[0..kTaps). uint8 x int16 products summed in int32: the compiler turns the x
// loop into 16-bit widening multiplies (pmullw/pmulhw on SSE2, smull on NEON).
template <int kTaps>
void ColumnsFixed(const uint8_t* const* rows, const int16_t* k, int bits, int n,
                  uint8_t* __restrict dst) {
  const uint8_t* __restrict r[kTaps];
  int16_t w[kTaps];
  for (int t = 0; t < kTaps; ++t) {
    r[t] = rows[t];
    w[t] = k[t];
  }
  const int32_t half = int32_t{1} << (bits - 1);
  for (int x = 0; x < n; ++x) {
    int32_t s = half;
    for (int t = 0; t < kTaps; ++t) s += static_cast<int16_t>(r[t][x]) * w[t];
    dst[x] = Clip8(s >> bits);
  }
}

void ColumnsAny(const uint8_t* const* rows, const int16_t* k, int taps, int bits, int n,
                uint8_t* __restrict dst) {
  constexpr int kChunk = 256;
  int32_t a[kChunk];
  const int32_t half = int32_t{1} << (bits - 1);
  for (int x0 = 0; x0 < n; x0 += kChunk) {
    const int m = std::min(kChunk, n - x0);
    for (int x = 0; x < m; ++x) a[x] = half;
    for (int t = 0; t < taps; ++t) {
      const uint8_t* __restrict row = rows[t] + x0;
      const int16_t w = k[t];
      for (int x = 0; x < m; ++x) a[x] += static_cast<int16_t>(row[x]) * w;
    }
    for (int x = 0; x < m; ++x) dst[x0 + x] = Clip8(a[x] >> bits);
  }
}

// Output k of `taps` into `out` (n bytes) from its taps() source rows `rows`.
void WeightedRow(const uint8_t* const* rows, const AxisTaps& taps, int k, int n,
                 uint8_t* out) {
  const int t = taps.taps();
  const int bits = taps.precision_bits();
  const int16_t* w = taps.weights() + static_cast<size_t>(k) * t;
  switch (t) {
    case 1: return ColumnsFixed<1>(rows, w, bits, n, out);
    case 2: return ColumnsFixed<2>(rows, w, bits, n, out);
    case 3: return ColumnsFixed<3>(rows, w, bits, n, out);
    case 4: return ColumnsFixed<4>(rows, w, bits, n, out);
    case 5: return ColumnsFixed<5>(rows, w, bits, n, out);
    case 6: return ColumnsFixed<6>(rows, w, bits, n, out);
    case 7: return ColumnsFixed<7>(rows, w, bits, n, out);
    case 8: return ColumnsFixed<8>(rows, w, bits, n, out);
    default: return ColumnsAny(rows, w, t, bits, n, out);
  }
}

// Writes `row` (pixels RGB pixels) as pixel column `column` of an image whose rows are
// `pixel_stride` bytes apart. Columns are written left to right, so every column but the
// last stores each pixel as 4 bytes (one load, one store): the spare byte lands on the
// next column, which is written afterwards. `row` has one readable byte of slack.
void WriteColumn(const uint8_t* row, int pixels, int column, bool last, uint8_t* image,
                 ptrdiff_t pixel_stride) {
  uint8_t* out = image + static_cast<ptrdiff_t>(column) * 3;
  if (!last) {
    for (int i = 0; i < pixels; ++i, out += pixel_stride) std::memcpy(out, row + 3 * i, 4);
  } else {
    for (int i = 0; i < pixels; ++i, out += pixel_stride) std::memcpy(out, row + 3 * i, 3);
  }
}

}  // namespace

AxisMap ScaleAxisMap(const AxisMap& map, int num, int denom, int scaled_size) {
  if (num == denom) return map;
  const double s = static_cast<double>(num) / denom;
  AxisMap out = map;
  out.clip_begin = static_cast<int>((static_cast<int64_t>(map.clip_begin) * num) / denom);
  out.clip_end = static_cast<int>(
      (static_cast<int64_t>(map.clip_end) * num + denom - 1) / denom);
  out.clip_end = std::min(out.clip_end, scaled_size);
  out.clip_begin = std::min(out.clip_begin, out.clip_end - 1);
  out.in0 = (map.clip_begin + map.in0) * s - out.clip_begin;
  out.scale = map.scale * s;
  return out;
}

void AxisTaps::Plan(const AxisMap& map) {
  const double scale = map.scale;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  const int in_size = map.clip_end - map.clip_begin;

  out_size_ = map.out_size;
  first_.resize(out_size_);
  counts_.resize(out_size_);
  scratch_.resize(static_cast<size_t>(out_size_) * ksize);

  // Pillow's precompute_coeffs, step for step (the casts truncate toward zero there too).
  const double ss = 1.0 / filterscale;
  int max_count = 1;
  for (int xx = 0; xx < out_size_; ++xx) {
    const double center = map.in0 + (xx + map.out_offset + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    const int n = std::max(xmax - xmin, 0);
    double* k = &scratch_[static_cast<size_t>(xx) * ksize];
    double ww = 0.0;
    for (int x = 0; x < n; ++x) {
      k[x] = Triangle((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    if (ww != 0.0) {
      for (int x = 0; x < n; ++x) k[x] /= ww;
    }
    first_[xx] = xmin;
    counts_[xx] = n;
    max_count = std::max(max_count, n);
  }

  // Every output reads the same number of pixels, the window moved left at the right
  // edge. Weights become int16 fixed point with the most fractional bits that keep the
  // largest weight below 2^15 (Note [Fixed-point weights]).
  taps_ = std::min(max_count, in_size);
  double largest = 0.0;
  for (int xx = 0; xx < out_size_; ++xx) {
    const double* k = &scratch_[static_cast<size_t>(xx) * ksize];
    for (int x = 0; x < counts_[xx]; ++x) largest = std::max(largest, std::abs(k[x]));
  }
  precision_bits_ = kPrecisionBits;
  while (precision_bits_ > 8 && largest * (1 << precision_bits_) + 0.5 > 32767.0) {
    --precision_bits_;
  }
  weights_.assign(static_cast<size_t>(out_size_) * taps_, 0);
  int lo = in_size;
  int hi = 0;
  for (int xx = 0; xx < out_size_; ++xx) {
    const int xmin = first_[xx];
    const int start = std::min(xmin, in_size - taps_);
    const double* k = &scratch_[static_cast<size_t>(xx) * ksize];
    int16_t* w = &weights_[static_cast<size_t>(xx) * taps_ + (xmin - start)];
    for (int x = 0; x < counts_[xx]; ++x) {
      w[x] = static_cast<int16_t>(std::lround(k[x] * (1 << precision_bits_)));
    }
    first_[xx] = start;
    lo = std::min(lo, start);
    hi = std::max(hi, start + taps_);
  }
  for (int32_t& f : first_) f -= lo;
  source_begin_ = map.clip_begin + lo;
  source_end_ = map.clip_begin + hi;
}

size_t AxisTaps::capacity_bytes() const {
  return (first_.capacity() + counts_.capacity()) * sizeof(int32_t) +
         weights_.capacity() * sizeof(int16_t) + scratch_.capacity() * sizeof(double);
}

void RgbResampler::Start(const AxisTaps& h, const AxisTaps& v, bool mirror) {
  h_ = &h;
  v_ = &v;
  mirror_ = mirror;
  rows_received_ = 0;
  next_output_ = 0;
  const int width = h.source_size();
  row_bytes_ = static_cast<size_t>(width) * 3;
  const size_t window_bytes = row_bytes_ * v.taps();
  if (window_.size() < window_bytes) window_.resize(window_bytes);
  const size_t transposed_bytes = static_cast<size_t>(width) * v.out_size() * 3;
  if (transposed_.size() < transposed_bytes) transposed_.resize(transposed_bytes);
  const size_t row_bytes = static_cast<size_t>(std::max(width, v.out_size())) * 3 + 1;
  if (row_.size() < row_bytes) row_.resize(row_bytes);
  if (pointers_.size() < static_cast<size_t>(std::max(v.taps(), h.taps()))) {
    pointers_.resize(std::max(v.taps(), h.taps()));
  }
}

void RgbResampler::AddRow(const uint8_t* rgb) {
  const AxisTaps& v = *v_;
  const int taps = v.taps();
  const int y = rows_received_++;
  std::memcpy(&window_[(y % taps) * row_bytes_], rgb, row_bytes_);
  // Every output whose last source row this is can be computed now; its rows are the last
  // `taps` received, so they are all in the window.
  const int width = h_->source_size();
  while (next_output_ < v.out_size() && v.first()[next_output_] + taps - 1 == y) {
    const int first = v.first()[next_output_];
    for (int t = 0; t < taps; ++t) {
      pointers_[t] = &window_[((first + t) % taps) * row_bytes_];
    }
    WeightedRow(pointers_.data(), v, next_output_, width * 3, row_.data());
    // Stored transposed: one row per source column, v.out_size() pixels long.
    WriteColumn(row_.data(), width, next_output_, next_output_ + 1 == v.out_size(),
                transposed_.data(), static_cast<ptrdiff_t>(v.out_size()) * 3);
    ++next_output_;
  }
}

void RgbResampler::Finish(uint8_t* dst, ptrdiff_t dst_stride) {
  const AxisTaps& h = *h_;
  const int height = v_->out_size();
  const ptrdiff_t transposed_stride = static_cast<ptrdiff_t>(height) * 3;
  const int columns = h.out_size();
  for (int c = 0; c < columns; ++c) {
    const int k = mirror_ ? columns - 1 - c : c;
    const uint8_t* first = transposed_.data() + h.first()[k] * transposed_stride;
    for (int t = 0; t < h.taps(); ++t) pointers_[t] = first + t * transposed_stride;
    WeightedRow(pointers_.data(), h, k, height * 3, row_.data());
    WriteColumn(row_.data(), height, c, c + 1 == columns, dst, dst_stride);
  }
}

size_t RgbResampler::capacity_bytes() const {
  return window_.capacity() + transposed_.capacity() + row_.capacity() +
         pointers_.capacity() * sizeof(const uint8_t*);
}

void ResampleImageRgb(const uint8_t* src, int width, int height, const AxisMap& x,
                      const AxisMap& y, bool mirror, uint8_t* dst) {
  AxisTaps h, v;
  h.Plan(x);
  v.Plan(y);
  RgbResampler resampler;
  resampler.Start(h, v, mirror);
  const size_t stride = static_cast<size_t>(width) * 3;
  for (int row = v.source_begin(); row < v.source_end(); ++row) {
    resampler.AddRow(src + row * stride + static_cast<size_t>(h.source_begin()) * 3);
  }
  resampler.Finish(dst, static_cast<ptrdiff_t>(h.out_size()) * 3);
}

}  // namespace stoker::data_service::image
