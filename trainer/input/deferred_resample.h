// The arithmetic of the deferred samples' resample (deferred_resample_kernel.cu), as plain
// inline functions that compile for the GPU and the host alike, so that CPU tests check
// them against the data service's resampler: Pillow's antialiased bilinear filter
// (precompute_coeffs: a triangle of support max(scale, 1), renormalised over the source
// pixels it reads), here applied in one 2-D pass in float.
#ifndef STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_H_
#define STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_H_

#include <cstdint>

#ifdef __CUDACC__
#define STOKER_HOST_DEVICE __host__ __device__
#else
#define STOKER_HOST_DEVICE
#endif

namespace stoker::trainer {

// One axis, as data_service's DeferredAxis: output pixel k is centred at source
// coordinate clip_begin + in0 + (k + out_offset + 0.5) * scale; the filter reads source
// pixels [clip_begin, clip_end) only.
struct ResampleAxis {
  double in0;
  double scale;
  int32_t out_offset;
  int32_t clip_begin;
  int32_t clip_end;
  int32_t reserved;
};

// One sample: `src` is a decoded image of rows `src_pitch` bytes apart, 3 bytes per pixel,
// RGB; `dst` receives out_size x out_size x 3 bytes, HWC (device memory on the GPU).
struct ResampleJob {
  const uint8_t* src;
  uint8_t* dst;
  int64_t src_pitch;
  ResampleAxis x;
  ResampleAxis y;
  int32_t flip;
  int32_t reserved;
};

// Pillow's precompute_coeffs window for output pixel k of one axis: the first source pixel
// (relative to clip_begin), the number of taps, the filter's centre and 1 / filterscale.
struct AxisWindow {
  int first;
  int count;
  double center;
  double inverse_filterscale;
};

STOKER_HOST_DEVICE inline AxisWindow WindowOf(const ResampleAxis& axis, int k) {
  const double filterscale = axis.scale > 1.0 ? axis.scale : 1.0;
  const double support = filterscale;
  const int in_size = axis.clip_end - axis.clip_begin;
  AxisWindow w;
  w.center = axis.in0 + (k + axis.out_offset + 0.5) * axis.scale;
  int lo = static_cast<int>(w.center - support + 0.5);
  if (lo < 0) lo = 0;
  int hi = static_cast<int>(w.center + support + 0.5);
  if (hi > in_size) hi = in_size;
  w.first = lo;
  w.count = hi > lo ? hi - lo : 0;
  w.inverse_filterscale = 1.0 / filterscale;
  return w;
}

// The weight of tap i of a window, before normalisation.
STOKER_HOST_DEVICE inline float TapWeight(const AxisWindow& w, int i) {
  const double x = (i + w.first - w.center + 0.5) * w.inverse_filterscale;
  const double a = x < 0 ? -x : x;
  return a < 1.0 ? static_cast<float>(1.0 - a) : 0.0f;
}

// Output pixel (ox, oy) of `job`, written to `rgb` (3 bytes), before the flip.
STOKER_HOST_DEVICE inline void ResamplePixel(const ResampleJob& job, int ox, int oy, uint8_t* rgb) {
  const AxisWindow wx = WindowOf(job.x, ox);
  const AxisWindow wy = WindowOf(job.y, oy);
  float x_sum = 0.0f;
  for (int i = 0; i < wx.count; ++i) x_sum += TapWeight(wx, i);
  float y_sum = 0.0f;
  for (int j = 0; j < wy.count; ++j) y_sum += TapWeight(wy, j);
  float acc[3] = {0.0f, 0.0f, 0.0f};
  for (int j = 0; j < wy.count; ++j) {
    const float weight_y = TapWeight(wy, j);
    if (weight_y == 0.0f) continue;
    const uint8_t* row = job.src + (job.y.clip_begin + wy.first + j) * job.src_pitch +
                         static_cast<int64_t>(job.x.clip_begin + wx.first) * 3;
    float row_acc[3] = {0.0f, 0.0f, 0.0f};
    for (int i = 0; i < wx.count; ++i) {
      const float weight_x = TapWeight(wx, i);
      row_acc[0] += weight_x * row[i * 3 + 0];
      row_acc[1] += weight_x * row[i * 3 + 1];
      row_acc[2] += weight_x * row[i * 3 + 2];
    }
    acc[0] += weight_y * row_acc[0];
    acc[1] += weight_y * row_acc[1];
    acc[2] += weight_y * row_acc[2];
  }
  const float norm = (x_sum > 0.0f && y_sum > 0.0f) ? 1.0f / (x_sum * y_sum) : 0.0f;
  for (int c = 0; c < 3; ++c) {
    float v = acc[c] * norm + 0.5f;
    v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
    rgb[c] = static_cast<uint8_t>(v);
  }
}

// The whole sample, on the host (tests): what the kernel writes for `job`.
inline void ResampleJobOnHost(const ResampleJob& job, int out_size) {
  for (int oy = 0; oy < out_size; ++oy) {
    for (int ox = 0; ox < out_size; ++ox) {
      const int out_x = job.flip ? out_size - 1 - ox : ox;
      ResamplePixel(job, ox, oy, job.dst + (static_cast<int64_t>(oy) * out_size + out_x) * 3);
    }
  }
}

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_H_
