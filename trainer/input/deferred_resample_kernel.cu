#include "trainer/input/deferred_resample_kernel.h"

namespace stoker::trainer {
namespace {

// Pillow's precompute_coeffs for output pixel k of one axis: the first source pixel
// (relative to clip_begin), the number of taps, and the filter's centre and 1/scale.
struct AxisWindow {
  int first;
  int count;
  double center;
  double inverse_filterscale;
};

__device__ AxisWindow Window(const ResampleAxis& axis, int k) {
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

__device__ float Triangle(double x) {
  const double a = x < 0 ? -x : x;
  return a < 1.0 ? static_cast<float>(1.0 - a) : 0.0f;
}

// One thread per output pixel; blockIdx.y is the job.
__global__ void DeferredResampleKernel(const ResampleJob* jobs, int out_size) {
  const ResampleJob& job = jobs[blockIdx.y];
  const int pixel = blockIdx.x * blockDim.x + threadIdx.x;
  if (pixel >= out_size * out_size) return;
  const int oy = pixel / out_size;
  const int ox = pixel % out_size;
  const AxisWindow wx = Window(job.x, ox);
  const AxisWindow wy = Window(job.y, oy);
  float x_sum = 0.0f;
  for (int i = 0; i < wx.count; ++i) {
    x_sum += Triangle((i + wx.first - wx.center + 0.5) * wx.inverse_filterscale);
  }
  float y_sum = 0.0f;
  for (int j = 0; j < wy.count; ++j) {
    y_sum += Triangle((j + wy.first - wy.center + 0.5) * wy.inverse_filterscale);
  }
  float acc[3] = {0.0f, 0.0f, 0.0f};
  for (int j = 0; j < wy.count; ++j) {
    const float weight_y = Triangle((j + wy.first - wy.center + 0.5) * wy.inverse_filterscale);
    if (weight_y == 0.0f) continue;
    const uint8_t* row = job.src + (job.y.clip_begin + wy.first + j) * job.src_pitch +
                         static_cast<int64_t>(job.x.clip_begin + wx.first) * 3;
    float row_acc[3] = {0.0f, 0.0f, 0.0f};
    for (int i = 0; i < wx.count; ++i) {
      const float weight_x = Triangle((i + wx.first - wx.center + 0.5) * wx.inverse_filterscale);
      row_acc[0] += weight_x * row[i * 3 + 0];
      row_acc[1] += weight_x * row[i * 3 + 1];
      row_acc[2] += weight_x * row[i * 3 + 2];
    }
    acc[0] += weight_y * row_acc[0];
    acc[1] += weight_y * row_acc[1];
    acc[2] += weight_y * row_acc[2];
  }
  const float norm = (x_sum > 0.0f && y_sum > 0.0f) ? 1.0f / (x_sum * y_sum) : 0.0f;
  const int out_x = job.flip ? out_size - 1 - ox : ox;
  uint8_t* out = job.dst + (static_cast<int64_t>(oy) * out_size + out_x) * 3;
  for (int c = 0; c < 3; ++c) {
    float v = acc[c] * norm + 0.5f;
    v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
    out[c] = static_cast<uint8_t>(v);
  }
}

}  // namespace

cudaError_t LaunchDeferredResample(const ResampleJob* jobs, int count, int out_size,
                                   cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int pixels = out_size * out_size;
  const dim3 grid((pixels + kThreads - 1) / kThreads, count);
  DeferredResampleKernel<<<grid, kThreads, 0, stream>>>(jobs, out_size);
  return cudaGetLastError();
}

}  // namespace stoker::trainer
