// Pillow-exact antialiased bilinear resampling, with fixed tap counts so that the compiler
// unrolls the tap loops and vectorises the vertical pass across the row.
#include "data_service/image/resample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace stoker::data_service::image {
namespace {

constexpr int kBits = AxisTaps::kPrecisionBits;
constexpr int32_t kHalf = int32_t{1} << (kBits - 1);

// Pillow's bilinear_filter: the triangle of support 1.
inline double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's clip8: the accumulator's integer part, clamped to [0, 255].
inline uint8_t Clip8(int32_t acc) {
  const int32_t v = acc >> kBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

template <int kTaps>
void RowFixed(const uint8_t* __restrict src, const int32_t* __restrict first,
              const int32_t* __restrict weights, int out_size, int step,
              uint8_t* __restrict dst) {
  for (int x = 0; x < out_size; ++x) {
    const uint8_t* p = src + 3 * first[x];
    const int32_t* k = weights + x * kTaps;
    int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
    for (int t = 0; t < kTaps; ++t) {
      s0 += p[3 * t + 0] * k[t];
      s1 += p[3 * t + 1] * k[t];
      s2 += p[3 * t + 2] * k[t];
    }
    dst[0] = Clip8(s0);
    dst[1] = Clip8(s1);
    dst[2] = Clip8(s2);
    dst += step;
  }
}

void RowAny(const uint8_t* __restrict src, const int32_t* __restrict first,
            const int32_t* __restrict weights, int taps, int out_size, int step,
            uint8_t* __restrict dst) {
  for (int x = 0; x < out_size; ++x) {
    const uint8_t* p = src + 3 * first[x];
    const int32_t* k = weights + x * taps;
    int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
    for (int t = 0; t < taps; ++t) {
      s0 += p[3 * t + 0] * k[t];
      s1 += p[3 * t + 1] * k[t];
      s2 += p[3 * t + 2] * k[t];
    }
    dst[0] = Clip8(s0);
    dst[1] = Clip8(s1);
    dst[2] = Clip8(s2);
    dst += step;
  }
}

// One output row of the vertical pass: n bytes, each a weighted sum down kTaps rows.
template <int kTaps>
void ColumnsFixed(const uint8_t* src, ptrdiff_t stride, const int32_t* k, int n,
                  uint8_t* __restrict dst) {
  const uint8_t* __restrict r[kTaps];
  int32_t w[kTaps];
  for (int t = 0; t < kTaps; ++t) {
    r[t] = src + t * stride;
    w[t] = k[t];
  }
  for (int x = 0; x < n; ++x) {
    int32_t s = kHalf;
    for (int t = 0; t < kTaps; ++t) s += r[t][x] * w[t];
    dst[x] = Clip8(s);
  }
}

void ColumnsAny(const uint8_t* src, ptrdiff_t stride, const int32_t* k, int taps, int n,
                uint8_t* __restrict dst) {
  constexpr int kChunk = 256;
  int32_t a[kChunk];
  for (int x0 = 0; x0 < n; x0 += kChunk) {
    const int m = std::min(kChunk, n - x0);
    for (int x = 0; x < m; ++x) a[x] = kHalf;
    for (int t = 0; t < taps; ++t) {
      const uint8_t* __restrict row = src + t * stride + x0;
      const int32_t w = k[t];
      for (int x = 0; x < m; ++x) a[x] += row[x] * w;
    }
    for (int x = 0; x < m; ++x) dst[x0 + x] = Clip8(a[x]);
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
  taps_ = std::min(ksize, in_size);
  first_.resize(out_size_);
  weights_.assign(static_cast<size_t>(out_size_) * taps_, 0);
  scratch_.resize(ksize);

  const double ss = 1.0 / filterscale;
  int lo = in_size;
  int hi = 0;
  for (int xx = 0; xx < out_size_; ++xx) {
    // Pillow's precompute_coeffs, step for step (the casts truncate toward zero there too).
    const double center = map.in0 + (xx + map.out_offset + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    const int n = std::max(xmax - xmin, 0);
    double ww = 0.0;
    for (int x = 0; x < n; ++x) {
      const double w = Triangle((x + xmin - center + 0.5) * ss);
      scratch_[x] = w;
      ww += w;
    }
    // Every output reads `taps_` pixels: move the window left at the right edge.
    const int start = std::min(xmin, in_size - taps_);
    int32_t* k = &weights_[static_cast<size_t>(xx) * taps_ + (xmin - start)];
    for (int x = 0; x < n; ++x) {
      const double w = ww != 0.0 ? scratch_[x] / ww : scratch_[x];
      const double f = w * (1 << kBits);
      k[x] = static_cast<int32_t>(w < 0 ? f - 0.5 : f + 0.5);  // normalize_coeffs_8bpc
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
  return first_.capacity() * sizeof(int32_t) + weights_.capacity() * sizeof(int32_t) +
         scratch_.capacity() * sizeof(double);
}

void ResampleRowRgb(const uint8_t* src, const AxisTaps& h, bool mirror, uint8_t* dst) {
  const int n = h.out_size();
  const int step = mirror ? -3 : 3;
  uint8_t* out = mirror ? dst + 3 * (n - 1) : dst;
  const int32_t* first = h.first();
  const int32_t* w = h.weights();
  switch (h.taps()) {
    case 1: return RowFixed<1>(src, first, w, n, step, out);
    case 2: return RowFixed<2>(src, first, w, n, step, out);
    case 3: return RowFixed<3>(src, first, w, n, step, out);
    case 4: return RowFixed<4>(src, first, w, n, step, out);
    case 5: return RowFixed<5>(src, first, w, n, step, out);
    case 6: return RowFixed<6>(src, first, w, n, step, out);
    case 7: return RowFixed<7>(src, first, w, n, step, out);
    case 8: return RowFixed<8>(src, first, w, n, step, out);
    default: return RowAny(src, first, w, h.taps(), n, step, out);
  }
}

void ResampleColumnsRgb(const uint8_t* src, ptrdiff_t src_stride, int width,
                        const AxisTaps& v, uint8_t* dst, ptrdiff_t dst_stride) {
  const int n = 3 * width;
  const int taps = v.taps();
  for (int y = 0; y < v.out_size(); ++y) {
    const uint8_t* rows = src + v.first()[y] * src_stride;
    const int32_t* k = v.weights() + static_cast<size_t>(y) * taps;
    uint8_t* out = dst + y * dst_stride;
    switch (taps) {
      case 1: ColumnsFixed<1>(rows, src_stride, k, n, out); break;
      case 2: ColumnsFixed<2>(rows, src_stride, k, n, out); break;
      case 3: ColumnsFixed<3>(rows, src_stride, k, n, out); break;
      case 4: ColumnsFixed<4>(rows, src_stride, k, n, out); break;
      case 5: ColumnsFixed<5>(rows, src_stride, k, n, out); break;
      case 6: ColumnsFixed<6>(rows, src_stride, k, n, out); break;
      case 7: ColumnsFixed<7>(rows, src_stride, k, n, out); break;
      case 8: ColumnsFixed<8>(rows, src_stride, k, n, out); break;
      default: ColumnsAny(rows, src_stride, k, taps, n, out); break;
    }
  }
}

void ResampleRgb(const uint8_t* src, int width, int height, const AxisMap& x,
                 const AxisMap& y, bool mirror, uint8_t* dst) {
  AxisTaps h, v;
  h.Plan(x);
  v.Plan(y);
  const int rows = v.source_end() - v.source_begin();
  std::vector<uint8_t> tmp(static_cast<size_t>(rows) * h.out_size() * 3);
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = src + (static_cast<size_t>(v.source_begin() + r) * width +
                                h.source_begin()) * 3;
    ResampleRowRgb(row, h, mirror, &tmp[static_cast<size_t>(r) * h.out_size() * 3]);
  }
  ResampleColumnsRgb(tmp.data(), h.out_size() * 3, h.out_size(), v, dst,
                     h.out_size() * 3);
}

}  // namespace stoker::data_service::image
