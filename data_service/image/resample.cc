// Pillow-style antialiased bilinear resampling as two vectorised column passes: fixed tap
// counts let the compiler unroll the tap loop and vectorise across the row.
#include "data_service/image/resample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace stoker::data_service::image {
namespace {

// Pillow's bilinear_filter: the triangle of support 1.
inline double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t Clip8(int32_t v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// Note [AVX2 column passes]
// The column passes are compiled twice, for the x86-64 baseline (SSE2) and for AVX2, and
// WeightedRow() picks one at run time (__builtin_cpu_supports), so the same binary runs
// everywhere and uses 16 lanes of 16-bit multiplies where the CPU has them. The
// arithmetic is integer and identical in both: the bytes do not depend on the choice.
#if defined(__x86_64__) && defined(__GNUC__)
#define STOKER_RESAMPLE_AVX2 1
#define STOKER_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define STOKER_RESAMPLE_AVX2 0
#define STOKER_TARGET_AVX2
#endif

// One output row of a column pass: n bytes, each the weighted sum down the kTaps source
// rows rows[0..kTaps). uint8 x int16 products summed in int32: the compiler turns the x
// loop into 16-bit widening multiplies (pmullw/pmulhw on SSE2, smull on NEON). Inlined
// into each instruction-set variant below, which the vectoriser then compiles for it.
template <int kTaps>
__attribute__((always_inline)) inline void ColumnsFixedBody(const uint8_t* const* rows,
                                                            const int16_t* k, int bits, int n,
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

__attribute__((always_inline)) inline void ColumnsAnyBody(const uint8_t* const* rows,
                                                          const int16_t* k, int taps, int bits,
                                                          int n, uint8_t* __restrict dst) {
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

using ColumnPass = void (*)(const uint8_t* const* rows, const int16_t* k, int taps, int bits, int n,
                            uint8_t* dst);

template <int kTaps>
void ColumnsFixed(const uint8_t* const* rows, const int16_t* k, int, int bits, int n,
                  uint8_t* dst) {
  ColumnsFixedBody<kTaps>(rows, k, bits, n, dst);
}

void ColumnsAny(const uint8_t* const* rows, const int16_t* k, int taps, int bits, int n,
                uint8_t* dst) {
  ColumnsAnyBody(rows, k, taps, bits, n, dst);
}

#if STOKER_RESAMPLE_AVX2
// Note [AVX2 column passes]: 16 outputs at a time, two taps per vpmaddwd. Source bytes
// are widened to int16, the rows of taps t and t+1 interleaved, and vpmaddwd sums
// a_t * w_t + a_t+1 * w_t+1 into int32, exactly the scalar loop's products and sums (an
// odd last tap pairs with weight 0). unpacklo/hi, packs and packus all work within
// 128-bit lanes, so the outputs come back in order after one cross-lane permute.
template <int kTaps>
STOKER_TARGET_AVX2 void ColumnsFixedAvx2(const uint8_t* const* rows, const int16_t* k, int,
                                         int bits, int n, uint8_t* dst) {
  constexpr int kPairs = (kTaps + 1) / 2;
  __m256i weights[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    const int16_t w0 = k[2 * p];
    const int16_t w1 = 2 * p + 1 < kTaps ? k[2 * p + 1] : 0;
    weights[p] = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint16_t>(w0)) |
                                   (static_cast<int32_t>(static_cast<uint16_t>(w1)) << 16));
  }
  const __m256i half = _mm256_set1_epi32(int32_t{1} << (bits - 1));
  const __m128i shift = _mm_cvtsi32_si128(bits);
  const __m256i zero = _mm256_setzero_si256();
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m256i lo = half;
    __m256i hi = half;
    for (int p = 0; p < kPairs; ++p) {
      const __m256i a =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2 * p] + x)));
      const __m256i b = 2 * p + 1 < kTaps
                            ? _mm256_cvtepu8_epi16(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(rows[2 * p + 1] + x)))
                            : zero;
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), weights[p]));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), weights[p]));
    }
    lo = _mm256_sra_epi32(lo, shift);
    hi = _mm256_sra_epi32(hi, shift);
    const __m256i words = _mm256_packs_epi32(lo, hi);         // in order within lanes
    const __m256i bytes = _mm256_packus_epi16(words, words);  // clamps to 0..255
    const __m256i ordered = _mm256_permute4x64_epi64(bytes, 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + x), _mm256_castsi256_si128(ordered));
  }
  if (x < n) {
    const uint8_t* tail_rows[kTaps];
    for (int t = 0; t < kTaps; ++t) tail_rows[t] = rows[t] + x;
    ColumnsFixedBody<kTaps>(tail_rows, k, bits, n - x, dst + x);
  }
}

STOKER_TARGET_AVX2 void ColumnsAnyAvx2(const uint8_t* const* rows, const int16_t* k, int taps,
                                       int bits, int n, uint8_t* dst) {
  ColumnsAnyBody(rows, k, taps, bits, n, dst);
}
#endif

// The column pass for 1..8 taps (index taps - 1) and for more (index 8).
struct ColumnPasses {
  ColumnPass pass[9];
};

ColumnPasses BaselineColumnPasses() {
  return {{&ColumnsFixed<1>, &ColumnsFixed<2>, &ColumnsFixed<3>, &ColumnsFixed<4>, &ColumnsFixed<5>,
           &ColumnsFixed<6>, &ColumnsFixed<7>, &ColumnsFixed<8>, &ColumnsAny}};
}

bool CpuHasAvx2() {
#if STOKER_RESAMPLE_AVX2
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

ColumnPasses ChooseColumnPasses(bool avx2) {
#if STOKER_RESAMPLE_AVX2
  if (avx2) {
    return {{&ColumnsFixedAvx2<1>, &ColumnsFixedAvx2<2>, &ColumnsFixedAvx2<3>, &ColumnsFixedAvx2<4>,
             &ColumnsFixedAvx2<5>, &ColumnsFixedAvx2<6>, &ColumnsFixedAvx2<7>, &ColumnsFixedAvx2<8>,
             &ColumnsAnyAvx2}};
  }
#endif
  return BaselineColumnPasses();
}

void RunColumnPass(const ColumnPasses& passes, const uint8_t* const* rows, const int16_t* w,
                   int taps, int bits, int n, uint8_t* out) {
  passes.pass[std::min(taps, 9) - 1](rows, w, taps, bits, n, out);
}

// Output k of `taps` into `out` (n bytes) from its taps() source rows `rows`.
void WeightedRow(const uint8_t* const* rows, const AxisTaps& taps, int k, int n, uint8_t* out) {
  static const ColumnPasses passes = ChooseColumnPasses(CpuHasAvx2());  // Note [AVX2 ...]
  const int t = taps.taps();
  const int16_t* w = taps.weights() + static_cast<size_t>(k) * t;
  RunColumnPass(passes, rows, w, t, taps.precision_bits(), n, out);
}

// Note [Blocked transposed writes]
// Each pass writes its rows transposed: row k of the pass becomes pixel column k of the
// next image. Written one row at a time, every pixel of a row lands on a different cache
// line. Instead up to kBlockRows rows are computed into a small block first (in L1), and
// the block is written as runs of kBlockRows consecutive pixels, one run per image row:
// kBlockRows times fewer cache lines touched per pixel.

// Writes rows [0, count) of `block` (each `pixels` RGB pixels, `block_stride` bytes
// apart) as pixel columns first_column.. of an image whose rows are `pixel_stride` bytes
// apart. Pixels are copied as 4 bytes (one load, one store) except the last of each run:
// the spare byte lands on the next pixel of the run, written right after. `block` rows
// have kBlockSlack readable bytes of slack.
void WriteColumnsScalar(const uint8_t* block, size_t block_stride, int count, int pixels,
                        int first_column, uint8_t* image, ptrdiff_t pixel_stride) {
  uint8_t* out = image + static_cast<ptrdiff_t>(first_column) * 3;
  for (int i = 0; i < pixels; ++i, out += pixel_stride) {
    const uint8_t* in = block + 3 * i;
    int j = 0;
    for (; j + 1 < count; ++j) std::memcpy(out + 3 * j, in + j * block_stride, 4);
    std::memcpy(out + 3 * j, in + j * block_stride, 3);
  }
}

#if STOKER_RESAMPLE_AVX2
// WriteColumnsScalar() for a full block of 8 rows, 8 pixels at a time: each row's 8
// pixels are spread to 32-bit lanes, the 8 x 8 lanes transposed, and each column of
// 8 pixels packed back to 24 bytes. Reads up to 8 bytes past a row's last pixel.
STOKER_TARGET_AVX2 void WriteColumns8Avx2(const uint8_t* block, size_t block_stride, int pixels,
                                          int first_column, uint8_t* image,
                                          ptrdiff_t pixel_stride) {
  // Lane 0 gets bytes 0..15 (pixels 0-3 at 0..11), lane 1 bytes 12..27 (pixels 4-7).
  const __m256i spread = _mm256_setr_epi32(0, 1, 2, 3, 3, 4, 5, 6);
  const __m256i widen = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, 0, 1,
                                         2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  const __m256i narrow = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0,
                                          1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i gather = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
  uint8_t* out = image + static_cast<ptrdiff_t>(first_column) * 3;
  int i = 0;
  for (; i + 8 <= pixels; i += 8) {
    __m256i r[8];
    for (int j = 0; j < 8; ++j) {
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + j * block_stride + 3 * i));
      r[j] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(v, spread), widen);
    }
    // 8 x 8 transpose of 32-bit pixels: t[p] = pixel i + p of rows 0..7.
    const __m256i a0 = _mm256_unpacklo_epi32(r[0], r[1]), a1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i a2 = _mm256_unpacklo_epi32(r[2], r[3]), a3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i a4 = _mm256_unpacklo_epi32(r[4], r[5]), a5 = _mm256_unpackhi_epi32(r[4], r[5]);
    const __m256i a6 = _mm256_unpacklo_epi32(r[6], r[7]), a7 = _mm256_unpackhi_epi32(r[6], r[7]);
    const __m256i b0 = _mm256_unpacklo_epi64(a0, a2), b1 = _mm256_unpackhi_epi64(a0, a2);
    const __m256i b2 = _mm256_unpacklo_epi64(a1, a3), b3 = _mm256_unpackhi_epi64(a1, a3);
    const __m256i b4 = _mm256_unpacklo_epi64(a4, a6), b5 = _mm256_unpackhi_epi64(a4, a6);
    const __m256i b6 = _mm256_unpacklo_epi64(a5, a7), b7 = _mm256_unpackhi_epi64(a5, a7);
    const __m256i t[8] = {
        _mm256_permute2x128_si256(b0, b4, 0x20), _mm256_permute2x128_si256(b1, b5, 0x20),
        _mm256_permute2x128_si256(b2, b6, 0x20), _mm256_permute2x128_si256(b3, b7, 0x20),
        _mm256_permute2x128_si256(b0, b4, 0x31), _mm256_permute2x128_si256(b1, b5, 0x31),
        _mm256_permute2x128_si256(b2, b6, 0x31), _mm256_permute2x128_si256(b3, b7, 0x31)};
    for (int p = 0; p < 8; ++p) {
      const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(t[p], narrow), gather);
      uint8_t* o = out + (i + p) * pixel_stride;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(packed));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + 16), _mm256_extracti128_si256(packed, 1));
    }
  }
  if (i < pixels) {
    WriteColumnsScalar(block + 3 * i, block_stride, 8, pixels - i, first_column,
                       image + i * pixel_stride, pixel_stride);
  }
}
#endif

void WriteColumns(const uint8_t* block, size_t block_stride, int count, int pixels,
                  int first_column, uint8_t* image, ptrdiff_t pixel_stride) {
#if STOKER_RESAMPLE_AVX2
  static const bool avx2 = CpuHasAvx2();
  if (count == 8 && avx2) {
    return WriteColumns8Avx2(block, block_stride, pixels, first_column, image, pixel_stride);
  }
#endif
  WriteColumnsScalar(block, block_stride, count, pixels, first_column, image, pixel_stride);
}

}  // namespace

namespace internal {

bool ColumnPassHasAvx2() { return CpuHasAvx2(); }

void ColumnPassForTesting(bool avx2, const uint8_t* const* rows, const int16_t* weights, int taps,
                          int bits, int n, uint8_t* dst) {
  RunColumnPass(avx2 ? ChooseColumnPasses(true) : BaselineColumnPasses(), rows, weights, taps, bits,
                n, dst);
}

}  // namespace internal

AxisMap ScaleAxisMap(const AxisMap& map, int num, int denom, int scaled_size) {
  if (num == denom) return map;
  const double s = static_cast<double>(num) / denom;
  AxisMap out = map;
  out.clip_begin = static_cast<int>((static_cast<int64_t>(map.clip_begin) * num) / denom);
  out.clip_end = static_cast<int>((static_cast<int64_t>(map.clip_end) * num + denom - 1) / denom);
  out.clip_end = std::min(out.clip_end, scaled_size);
  out.clip_begin = std::min(out.clip_begin, out.clip_end - 1);
  out.in0 = (map.clip_begin + map.in0) * s - out.clip_begin;
  out.scale = map.scale * s;
  return out;
}

void AxisTaps::Plan(const AxisMap& map) {
  if (planned_ && map == planned_map_) return;
  planned_ = true;
  planned_map_ = map;
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
  if (window_.size() < static_cast<size_t>(v.taps())) window_.resize(v.taps());
  const size_t transposed_bytes = static_cast<size_t>(width) * v.out_size() * 3;
  if (transposed_.size() < transposed_bytes) transposed_.resize(transposed_bytes);
  block_stride_ = static_cast<size_t>(std::max(width, v.out_size())) * 3 + kBlockSlack;
  if (block_.size() < block_stride_ * kBlockRows) block_.resize(block_stride_ * kBlockRows);
  block_rows_ = 0;
  if (pointers_.size() < static_cast<size_t>(std::max(v.taps(), h.taps()))) {
    pointers_.resize(std::max(v.taps(), h.taps()));
  }
}

void RgbResampler::AddRow(const uint8_t* rgb) {
  const AxisTaps& v = *v_;
  const int taps = v.taps();
  const int y = rows_received_++;
  window_[y % taps] = rgb;  // valid for taps - 1 more rows (rows_kept())
  // Every output whose last source row this is can be computed now; its rows are the last
  // `taps` received, so they are all in the window.
  const int width = h_->source_size();
  while (next_output_ < v.out_size() && v.first()[next_output_] + taps - 1 == y) {
    const int first = v.first()[next_output_];
    for (int t = 0; t < taps; ++t) pointers_[t] = window_[(first + t) % taps];
    WeightedRow(pointers_.data(), v, next_output_, width * 3, &block_[block_rows_ * block_stride_]);
    ++block_rows_;
    ++next_output_;
    if (block_rows_ == kBlockRows) FlushVerticalBlock();
  }
}

void RgbResampler::FlushVerticalBlock() {
  // Stored transposed: one row per source column, v.out_size() pixels long.
  WriteColumns(block_.data(), block_stride_, block_rows_, h_->source_size(),
               next_output_ - block_rows_, transposed_.data(),
               static_cast<ptrdiff_t>(v_->out_size()) * 3);
  block_rows_ = 0;
}

void RgbResampler::Finish(uint8_t* dst, ptrdiff_t dst_stride) {
  if (block_rows_ > 0) FlushVerticalBlock();
  const AxisTaps& h = *h_;
  const int height = v_->out_size();
  const ptrdiff_t transposed_stride = static_cast<ptrdiff_t>(height) * 3;
  const int columns = h.out_size();
  for (int c0 = 0; c0 < columns; c0 += kBlockRows) {
    const int count = std::min(kBlockRows, columns - c0);
    for (int j = 0; j < count; ++j) {
      const int k = mirror_ ? columns - 1 - (c0 + j) : c0 + j;
      const uint8_t* first = transposed_.data() + h.first()[k] * transposed_stride;
      for (int t = 0; t < h.taps(); ++t) pointers_[t] = first + t * transposed_stride;
      WeightedRow(pointers_.data(), h, k, height * 3, &block_[j * block_stride_]);
    }
    WriteColumns(block_.data(), block_stride_, count, height, c0, dst, dst_stride);
  }
}

size_t RgbResampler::capacity_bytes() const {
  return (window_.capacity() + pointers_.capacity()) * sizeof(const uint8_t*) +
         transposed_.capacity() + block_.capacity();
}

void ResampleImageRgb(const uint8_t* src, int width, int height, const AxisMap& x, const AxisMap& y,
                      bool mirror, uint8_t* dst) {
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
