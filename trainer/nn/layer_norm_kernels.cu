#include "trainer/nn/layer_norm_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/element_conversions.cuh"
#include "trainer/nn/kernel_elements.cuh"

namespace stoker::trainer {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // one warp a row
constexpr int kChunkRows = 256;   // rows per partial sum of the parameter gradients
constexpr int kColumnThreads = 32;
constexpr int kRowThreads = 8;

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

// One warp a row, X the input's element type and Y the output's (and the branch's). The row
// is read once from global memory and again from cache. With a branch, X is float.
template <typename X, typename Y>
__global__ void ForwardKernel(const X* __restrict__ x, const Y* __restrict__ branch,
                              float* __restrict__ sum, Y* __restrict__ y,
                              const float* __restrict__ weight, const float* __restrict__ bias,
                              float eps, int64_t rows, int width, float* __restrict__ mean_out,
                              float* __restrict__ rstd_out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t base = row * width;
  float total = 0.f;
  for (int j = lane; j < width; j += kWarp) {
    float v = ToFloat(x[base + j]);
    if (branch != nullptr) {
      v += ToFloat(branch[base + j]);
      sum[base + j] = v;
    }
    total += v;
  }
  // Each lane reads back only what it wrote itself.
  auto in = [&](int j) { return branch != nullptr ? sum[base + j] : ToFloat(x[base + j]); };
  const float mean = WarpSum(total) / width;
  float squares = 0.f;
  for (int j = lane; j < width; j += kWarp) {
    const float d = in(j)-mean;
    squares += d * d;
  }
  const float rstd = rsqrtf(WarpSum(squares) / width + eps);
  for (int j = lane; j < width; j += kWarp) {
    y[base + j] = FromFloat<Y>((in(j)-mean) * rstd * weight[j] + bias[j]);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, one warp a row.
template <typename X, typename Y>
__global__ void BackwardKernel(const Y* __restrict__ dy, const X* __restrict__ x,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               const float* __restrict__ weight, const float* __restrict__ dx_in,
                               int64_t rows, int width, X* __restrict__ dx,
                               Y* __restrict__ dbranch) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t base = row * width;
  const float m = mean[row], r = rstd[row];
  float g_total = 0.f, gx_total = 0.f;
  for (int j = lane; j < width; j += kWarp) {
    const float g = ToFloat(dy[base + j]) * weight[j];
    g_total += g;
    gx_total += g * (ToFloat(x[base + j]) - m) * r;
  }
  const float g_mean = WarpSum(g_total) / width;
  const float gx_mean = WarpSum(gx_total) / width;
  for (int j = lane; j < width; j += kWarp) {
    const float g = ToFloat(dy[base + j]) * weight[j];
    const float xhat = (ToFloat(x[base + j]) - m) * r;
    float d = r * (g - g_mean - xhat * gx_mean);
    if (dx_in != nullptr) d += dx_in[base + j];
    dx[base + j] = FromFloat<X>(d);
    if (dbranch != nullptr) dbranch[base + j] = FromFloat<Y>(d);
  }
}

// Block (kColumnThreads, kRowThreads) over 32 columns and one chunk of kChunkRows rows.
template <typename X, typename Y>
__global__ void ParameterGradientKernel(const Y* __restrict__ dy, const X* __restrict__ x,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd, int64_t rows, int width,
                                        float* __restrict__ scratch) {
  __shared__ float dweight[kRowThreads][kColumnThreads];
  __shared__ float dbias[kRowThreads][kColumnThreads];
  const int column = blockIdx.x * kColumnThreads + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kChunkRows;
  const int64_t last = min(first + kChunkRows, rows);
  float w = 0.f, b = 0.f;
  if (column < width) {
    for (int64_t row = first + threadIdx.y; row < last; row += kRowThreads) {
      const float g = ToFloat(dy[row * width + column]);
      w += g * (ToFloat(x[row * width + column]) - mean[row]) * rstd[row];
      b += g;
    }
  }
  dweight[threadIdx.y][threadIdx.x] = w;
  dbias[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && column < width) {
    for (int i = 1; i < kRowThreads; ++i) {
      w += dweight[i][threadIdx.x];
      b += dbias[i][threadIdx.x];
    }
    float* out = scratch + static_cast<int64_t>(blockIdx.y) * 2 * width;
    out[column] = w;
    out[width + column] = b;
  }
}

unsigned RowBlocks(NormRows shape) {
  return static_cast<unsigned>((shape.rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Calls launch(X{}, Y{}) for the element types X of types.x and Y of types.y, one of the pairs
// the kernels take; cudaErrorInvalidValue for any other (two different 16-bit types).
template <typename Launch>
cudaError_t WithTypes(NormTypes types, Launch&& launch) {
  return internal::Dispatch(types.x, 1, [&](auto x, auto) {
    return internal::Dispatch(types.y, 1, [&](auto y, auto) -> cudaError_t {
      using X = decltype(x);
      using Y = decltype(y);
      if constexpr (!std::is_same_v<X, float> && !std::is_same_v<Y, float> &&
                    !std::is_same_v<X, Y>) {
        return cudaErrorInvalidValue;
      } else {
        return launch(x, y);
      }
    });
  });
}

}  // namespace

cudaError_t LaunchLayerNormForward(const void* x, const void* branch, float* sum, void* y,
                                   NormTypes types, const float* weight, const float* bias,
                                   float eps, NormRows shape, float* mean, float* rstd,
                                   cudaStream_t stream) {
  if (branch != nullptr && types.x != ElementType::kFloat32) return cudaErrorInvalidValue;
  return WithTypes(types, [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    if (shape.rows == 0) return cudaSuccess;
    ForwardKernel<X, Y><<<RowBlocks(shape), dim3(kWarp, kRowsPerBlock), 0, stream>>>(
        static_cast<const X*>(x), static_cast<const Y*>(branch), sum, static_cast<Y*>(y), weight,
        bias, eps, shape.rows, shape.width, mean, rstd);
    return cudaGetLastError();
  });
}

cudaError_t LaunchLayerNormBackward(const void* dy, const void* x, NormTypes types,
                                    const float* mean, const float* rstd, const float* weight,
                                    const float* dx_in, NormRows shape, void* dx, void* dbranch,
                                    cudaStream_t stream) {
  if ((dx_in != nullptr || dbranch != nullptr) && types.x != ElementType::kFloat32) {
    return cudaErrorInvalidValue;
  }
  return WithTypes(types, [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    if (shape.rows == 0) return cudaSuccess;
    BackwardKernel<X, Y><<<RowBlocks(shape), dim3(kWarp, kRowsPerBlock), 0, stream>>>(
        static_cast<const Y*>(dy), static_cast<const X*>(x), mean, rstd, weight, dx_in, shape.rows,
        shape.width, static_cast<X*>(dx), static_cast<Y*>(dbranch));
    return cudaGetLastError();
  });
}

int64_t LayerNormChunks(NormRows shape) { return (shape.rows + kChunkRows - 1) / kChunkRows; }

int64_t LayerNormScratchFloats(NormRows shape) { return LayerNormChunks(shape) * 2 * shape.width; }

cudaError_t LaunchLayerNormParameterGradients(const void* dy, const void* x, NormTypes types,
                                              const float* mean, const float* rstd, NormRows shape,
                                              float* scratch, cudaStream_t stream) {
  return WithTypes(types, [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    if (shape.rows == 0) return cudaSuccess;
    const dim3 grid((shape.width + kColumnThreads - 1) / kColumnThreads,
                    static_cast<unsigned>(LayerNormChunks(shape)));
    ParameterGradientKernel<X, Y><<<grid, dim3(kColumnThreads, kRowThreads), 0, stream>>>(
        static_cast<const Y*>(dy), static_cast<const X*>(x), mean, rstd, shape.rows, shape.width,
        scratch);
    return cudaGetLastError();
  });
}

}  // namespace stoker::trainer
