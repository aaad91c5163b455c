// The kernels of conv_bn_kernels.h.
#include "trainer/nn/conv_bn_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "trainer/nn/kernel_elements.cuh"
#include "trainer/nn/multiprocessors.h"

namespace stoker::trainer {
namespace {

using internal::Dispatch;
using internal::Load;
using internal::Store;
using internal::VectorWidth;

__global__ void FinalizeKernel(const float* sum, const float* sum_sq, int channels, double count,
                               float eps, float momentum, float* running_mean, float* running_var,
                               float* mean, float* invstd) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  // fp64 for the difference of two large sums (var = E[x^2] - E[x]^2).
  const double m = static_cast<double>(sum[c]) / count;
  const double var = fmax(static_cast<double>(sum_sq[c]) / count - m * m, 0.0);
  mean[c] = static_cast<float>(m);
  invstd[c] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  if (running_mean != nullptr) {
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * static_cast<float>(m);
  }
  if (running_var != nullptr) {
    const double unbiased = var * count / (count - 1.0);
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * static_cast<float>(unbiased);
  }
}

template <typename T>
__global__ void ScaleShiftKernel(const float* gamma, const float* beta, const float* mean,
                                 const float* invstd, int channels, T* scale, T* shift) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float s = gamma[c] * invstd[c];
  scale[c] = FromFloat<T>(s);
  shift[c] = FromFloat<T>(beta[c] - mean[c] * s);
}

template <typename T, int V>
__global__ void DataGradientKernel(const T* g, const T* x, int64_t rows, int channels,
                                   const float* mean, const float* invstd, const float* gamma,
                                   const float* dgamma, const float* dbeta, T* dx) {
  const int vectors_per_row = channels / V;
  const int64_t total = rows * vectors_per_row;
  const float inv_count = 1.0f / static_cast<float>(rows);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c0 = static_cast<int>(i % vectors_per_row) * V;
    const int64_t offset = (i / vectors_per_row) * channels + c0;
    float gv[V], xv[V], out[V];
    Load<T, V>(g + offset, gv);
    Load<T, V>(x + offset, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int c = c0 + j;
      const float is = invstd[c];
      const float xhat = (xv[j] - mean[c]) * is;
      out[j] = gamma[c] * is * (gv[j] - dbeta[c] * inv_count - xhat * dgamma[c] * inv_count);
    }
    Store<T, V>(dx + offset, out);
  }
}

}  // namespace

cudaError_t LaunchConvBnFinalize(const float* sum, const float* sum_sq, int channels, int64_t count,
                                 float eps, float momentum, float* running_mean, float* running_var,
                                 float* mean, float* invstd, cudaStream_t stream) {
  if (channels <= 0 || count < 2) return cudaErrorInvalidValue;
  FinalizeKernel<<<(channels + 127) / 128, 128, 0, stream>>>(
      sum, sum_sq, channels, static_cast<double>(count), eps, momentum, running_mean, running_var,
      mean, invstd);
  return cudaGetLastError();
}

cudaError_t LaunchConvBnScaleShift(const float* gamma, const float* beta, const float* mean,
                                   const float* invstd, int channels, ElementType scale_type,
                                   void* scale, void* shift, cudaStream_t stream) {
  if (channels <= 0) return cudaErrorInvalidValue;
  return Dispatch(scale_type, 1, [&](auto t, auto) {
    using T = decltype(t);
    ScaleShiftKernel<T><<<(channels + 127) / 128, 128, 0, stream>>>(
        gamma, beta, mean, invstd, channels, static_cast<T*>(scale), static_cast<T*>(shift));
    return cudaGetLastError();
  });
}

cudaError_t LaunchConvBnDataGradient(const void* g, const void* x, ElementType type,
                                     ChannelRows shape, const float* mean, const float* invstd,
                                     const float* gamma, const float* dgamma, const float* dbeta,
                                     void* dx, cudaStream_t stream) {
  if (shape.rows <= 0 || shape.channels <= 0) return cudaErrorInvalidValue;
  const int vec = VectorWidth(type, shape.channels, {g, x, dx});
  const int64_t vectors = shape.rows * (shape.channels / vec);
  constexpr int kThreads = 256;
  const int64_t wanted = (vectors + kThreads - 1) / kThreads;
  const int blocks =
      static_cast<int>(std::min<int64_t>(wanted, 32LL * CurrentDeviceMultiprocessors()));
  return Dispatch(type, vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    DataGradientKernel<T, V><<<std::max(blocks, 1), kThreads, 0, stream>>>(
        static_cast<const T*>(g), static_cast<const T*>(x), shape.rows, shape.channels, mean,
        invstd, gamma, dgamma, dbeta, static_cast<T*>(dx));
    return cudaGetLastError();
  });
}

}  // namespace stoker::trainer
