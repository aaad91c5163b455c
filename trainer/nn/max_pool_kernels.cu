// Max pooling on NHWC tensors with a one-byte argmax per output (max_pool_kernels.h).
#include "trainer/nn/max_pool_kernels.h"

#include <algorithm>

#include "trainer/nn/kernel_elements.cuh"
#include "trainer/nn/multiprocessors.h"

namespace stoker::trainer {
namespace {

constexpr int kPoolThreads = 256;

// Blocks of kPoolThreads for a grid-stride loop over `total` items: one item per thread
// where that is few enough, else 32 blocks per multiprocessor of the current device.
int GridStrideBlocks(int64_t total) {
  const int64_t most = 32 * static_cast<int64_t>(CurrentDeviceMultiprocessors());
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((total + kPoolThreads - 1) / kPoolThreads, most)));
}

// Calls f(n, h, w, c0) for every vector of V channels of an NHWC tensor [batch, height,
// width, channels] (image n, row h, column w, first channel c0), the grid's threads striding
// over the vectors in memory order. Precondition: V divides channels.
template <int V, typename F>
__device__ __forceinline__ void ForEachVector(int64_t batch, int height, int width, int channels,
                                              F&& f) {
  const int vectors = channels / V;
  const int64_t total = batch * height * width * vectors;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c0 = static_cast<int>(i % vectors) * V;
    int64_t t = i / vectors;
    const int w = static_cast<int>(t % width);
    t /= width;
    const int h = static_cast<int>(t % height);
    f(t / height, h, w, c0);
  }
}

// The offset of element (n, h, w, c) of an NHWC tensor of height x width x channels images.
__device__ __forceinline__ int64_t NhwcOffset(int64_t n, int h, int w, int c, int height, int width,
                                              int channels) {
  return ((n * height + h) * width + w) * channels + c;
}

// V argmax bytes as one access (V is 1, 4 or 8, and V-aligned).
template <int V>
__device__ __forceinline__ void LoadBytes(const uint8_t* p, uint8_t (&out)[V]) {
  if constexpr (V == 8) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
    memcpy(out, &raw, 8);
  } else if constexpr (V == 4) {
    const uint32_t raw = __ldg(reinterpret_cast<const unsigned int*>(p));
    memcpy(out, &raw, 4);
  } else {
    out[0] = p[0];
  }
}

template <int V>
__device__ __forceinline__ void StoreBytes(uint8_t* p, const uint8_t (&in)[V]) {
  if constexpr (V == 8) {
    uint2 raw;
    memcpy(&raw, in, 8);
    *reinterpret_cast<uint2*>(p) = raw;
  } else if constexpr (V == 4) {
    uint32_t raw;
    memcpy(&raw, in, 4);
    *reinterpret_cast<uint32_t*>(p) = raw;
  } else {
    p[0] = in[0];
  }
}

template <typename T, int V>
__global__ void MaxPoolForwardKernel(const T* __restrict__ x, T* __restrict__ y,
                                     uint8_t* __restrict__ argmax, PoolGeometry g) {
  ForEachVector<V>(
      g.batch, g.out_height, g.out_width, g.channels, [&](int64_t n, int oh, int ow, int c0) {
        const int h0 = oh * g.stride - g.padding, w0 = ow * g.stride - g.padding;
        const int first = (max(h0, 0) - h0) * g.kernel + (max(w0, 0) - w0);
        float best[V];
        uint8_t pick[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          best[j] = -INFINITY;
          pick[j] = static_cast<uint8_t>(first);
        }
        for (int kh = 0; kh < g.kernel; ++kh) {
          const int h = h0 + kh;
          if (h < 0 || h >= g.height) continue;
          for (int kw = 0; kw < g.kernel; ++kw) {
            const int w = w0 + kw;
            if (w < 0 || w >= g.width) continue;
            float v[V];
            internal::Load<T, V>(x + NhwcOffset(n, h, w, c0, g.height, g.width, g.channels), v);
#pragma unroll
            for (int j = 0; j < V; ++j) {
              if (v[j] > best[j] || isnan(v[j])) {
                best[j] = v[j];
                pick[j] = static_cast<uint8_t>(kh * g.kernel + kw);
              }
            }
          }
        }
        const int64_t out = NhwcOffset(n, oh, ow, c0, g.out_height, g.out_width, g.channels);
        internal::Store<T, V>(y + out, best);
        StoreBytes<V>(argmax + out, pick);
      });
}

template <typename T, int V>
__global__ void MaxPoolBackwardKernel(const T* __restrict__ dy, const uint8_t* __restrict__ argmax,
                                      T* __restrict__ dx, PoolGeometry g) {
  ForEachVector<V>(g.batch, g.height, g.width, g.channels, [&](int64_t n, int h, int w, int c0) {
    // Windows oh with oh * stride - padding <= h <= oh * stride - padding + kernel - 1.
    const int hi = h + g.padding, wi = w + g.padding;
    const int oh_lo = hi - g.kernel + 1 <= 0 ? 0 : (hi - g.kernel + g.stride) / g.stride;
    const int ow_lo = wi - g.kernel + 1 <= 0 ? 0 : (wi - g.kernel + g.stride) / g.stride;
    const int oh_hi = min(hi / g.stride, g.out_height - 1);
    const int ow_hi = min(wi / g.stride, g.out_width - 1);
    float sum[V] = {};
    for (int oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int ow = ow_lo; ow <= ow_hi; ++ow) {
        const int offset = (hi - oh * g.stride) * g.kernel + (wi - ow * g.stride);
        const int64_t out = NhwcOffset(n, oh, ow, c0, g.out_height, g.out_width, g.channels);
        float d[V];
        uint8_t pick[V];
        internal::Load<T, V>(dy + out, d);
        LoadBytes<V>(argmax + out, pick);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (pick[j] == offset) sum[j] += d[j];
        }
      }
    }
    internal::Store<T, V>(dx + NhwcOffset(n, h, w, c0, g.height, g.width, g.channels), sum);
  });
}

}  // namespace

cudaError_t LaunchMaxPoolForward(const void* x, ElementType type, const PoolGeometry& g, void* y,
                                 uint8_t* argmax, cudaStream_t stream) {
  // The argmax of V channels is one V-byte access, aligned where y's V-element one is.
  const int vec = internal::VectorWidth(type, g.channels, {x, y, argmax});
  const int64_t total = g.batch * g.out_height * g.out_width * (g.channels / vec);
  const int blocks = GridStrideBlocks(total);
  return internal::Dispatch(type, vec, [&](auto t, auto v) {
    using T = decltype(t);
    MaxPoolForwardKernel<T, decltype(v)::value><<<blocks, kPoolThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), argmax, g);
    return cudaGetLastError();
  });
}

cudaError_t LaunchMaxPoolBackward(const void* dy, const uint8_t* argmax, ElementType type,
                                  const PoolGeometry& g, void* dx, cudaStream_t stream) {
  const int vec = internal::VectorWidth(type, g.channels, {dy, dx, argmax});
  const int64_t total = g.batch * g.height * g.width * (g.channels / vec);
  const int blocks = GridStrideBlocks(total);
  return internal::Dispatch(type, vec, [&](auto t, auto v) {
    using T = decltype(t);
    MaxPoolBackwardKernel<T, decltype(v)::value><<<blocks, kPoolThreads, 0, stream>>>(
        static_cast<const T*>(dy), argmax, static_cast<T*>(dx), g);
    return cudaGetLastError();
  });
}

}  // namespace stoker::trainer
