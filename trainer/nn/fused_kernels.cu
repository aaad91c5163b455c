#include "trainer/nn/fused_kernels.h"

#include <algorithm>

#include "trainer/nn/kernel_elements.cuh"
#include "trainer/nn/multiprocessors.h"

namespace stoker::trainer {
namespace {

using internal::Dispatch;
using internal::Load;
using internal::Store;
using internal::VectorWidth;

// Note [Reduction layout]: a block is TX x TY threads; thread (tx, ty) owns V consecutive
// channels (c0 = (blockIdx.x * TX + tx) * V) and the rows ty + TY * (blockIdx.y + gridDim.y
// * k). Each thread reduces its rows, the block merges its TY partials in shared memory, and
// block row blockIdx.y writes one partial per channel to scratch; a finalize kernel merges
// the gridDim.y partials (Note [Finalize layout]). The plan is a function of the shape and
// the current device's multiprocessor count alone, so BatchNormScratchFloats and the launches
// agree on one device.
struct Plan {
  int vec, tx, ty;
  int channel_tiles, row_blocks;
};

constexpr int kThreads = 256;
constexpr int kMaxRowBlocks = 1024;
constexpr int kBlocksPerMultiprocessor = 8;  // a few blocks per multiprocessor

Plan MakePlan(ChannelRows s, int vec) {
  const int target_blocks = kBlocksPerMultiprocessor * CurrentDeviceMultiprocessors();
  Plan p;
  p.vec = vec;
  const int vectors = (s.channels + vec - 1) / vec;
  p.tx = std::min(vectors, 32);
  p.ty = kThreads / p.tx;
  p.channel_tiles = (vectors + p.tx - 1) / p.tx;
  const int64_t row_groups = (s.rows + p.ty - 1) / p.ty;
  const int64_t wanted = (target_blocks + p.channel_tiles - 1) / p.channel_tiles;
  p.row_blocks = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({wanted, row_groups, kMaxRowBlocks})));
  return p;
}

// Two values per (thread, channel) and a count per thread.
size_t ReductionSharedBytes(const Plan& p) {
  return (2 * static_cast<size_t>(p.tx) * p.vec * p.ty + static_cast<size_t>(p.tx) * p.ty) *
         sizeof(float);
}

// Chan et al.'s merge of (n, mean, m2) with (nb, mean_b, m2_b), for V channels sharing n.
template <int V>
__device__ __forceinline__ void MergeWelford(float& n, float (&mean)[V], float (&m2)[V], float nb,
                                             const float* mean_b, const float* m2_b) {
  if (nb == 0.f) return;
  const float total = n + nb, f = nb / total;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const float d = mean_b[i] - mean[i];
    mean[i] += d * f;
    m2[i] += m2_b[i] + d * d * n * f;
  }
  n = total;
}

// Scratch layout: [row_blocks][channels] first values, [row_blocks][channels] second
// values, [row_blocks] counts, [3][channels] coefficients.
struct Scratch {
  float *first, *second, *count, *coefficients;
};
Scratch Carve(float* scratch, ChannelRows s, const Plan& p) {
  const int64_t partial = static_cast<int64_t>(p.row_blocks) * s.channels;
  return {scratch, scratch + partial, scratch + 2 * partial, scratch + 2 * partial + p.row_blocks};
}

// Note [Block tree]: the TY partials of a block's column tx merge pairwise in shared memory,
// log2(TY) steps: at step `stride`, row ty (a multiple of 2 * stride) takes in row
// ty + stride. The rows read at a step (odd multiples of stride) and the rows written
// (multiples of 2 * stride) are disjoint, and a barrier ends each step.
//
// MergeRowsAsTree runs that tree for the calling thread, row `row` of `rows`: publish() writes
// the thread's partial to its place in shared memory, merge(other) takes in row `other`'s;
// row 0 ends with the merge of all rows. Every thread of the block calls it.
template <typename Publish, typename Merge>
__device__ __forceinline__ void MergeRowsAsTree(int row, int rows, Publish&& publish,
                                                Merge&& merge) {
  publish();
  __syncthreads();
  for (int stride = 1; stride < rows; stride *= 2) {
    if (row % (2 * stride) == 0 && row + stride < rows) {
      merge(row + stride);
      publish();
    }
    __syncthreads();
  }
}

// Writes a block's partials of channels c0 .. c0 + V - 1 into row blockIdx.y of `first` and
// `second` (each [row_blocks][channels], Note [Reduction layout]).
template <int V>
__device__ __forceinline__ void WritePartials(int channels, int c0, const float (&a)[V],
                                              const float (&b)[V], float* __restrict__ first,
                                              float* __restrict__ second) {
  const int64_t base = static_cast<int64_t>(blockIdx.y) * channels + c0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    first[base + i] = a[i];
    second[base + i] = b[i];
  }
}

template <typename T, int V>
__global__ void StatisticsKernel(const T* __restrict__ x, int64_t rows, int channels,
                                 float* __restrict__ part_mean, float* __restrict__ part_m2,
                                 float* __restrict__ part_count) {
  extern __shared__ float shared[];
  const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
  const int c0 = (blockIdx.x * TX + tx) * V;
  float mean[V] = {}, m2[V] = {}, n = 0.f;
  auto update = [&](const float(&v)[V]) {
    n += 1.f;
    const float inv = 1.f / n;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float d = v[i] - mean[i];
      mean[i] += d * inv;
      m2[i] += d * (v[i] - mean[i]);
    }
  };
  if (c0 < channels) {
    // kRowsInFlight rows are loaded before any is merged: one load at a time per thread
    // leaves the pass latency-bound (a single wave of blocks covers the tensor).
    constexpr int kRowsInFlight = 4;
    const int64_t stride = static_cast<int64_t>(gridDim.y) * TY;
    int64_t r = static_cast<int64_t>(blockIdx.y) * TY + ty;
    for (; r + (kRowsInFlight - 1) * stride < rows; r += kRowsInFlight * stride) {
      float v[kRowsInFlight][V];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u)
        Load<T, V>(x + (r + u * stride) * channels + c0, v[u]);
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) update(v[u]);
    }
    for (; r < rows; r += stride) {
      float v[V];
      Load<T, V>(x + r * channels + c0, v);
      update(v);
    }
  }
  // A tree over ty (Note [Block tree]).
  float* s_mean = shared;
  float* s_m2 = shared + TX * V * TY;
  float* s_n = shared + 2 * TX * V * TY;
  const int slot = ty * TX + tx;
  auto publish = [&] {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      s_mean[slot * V + i] = mean[i];
      s_m2[slot * V + i] = m2[i];
    }
    s_n[slot] = n;
  };
  MergeRowsAsTree(ty, TY, publish, [&](int row) {
    const int other = row * TX + tx;
    MergeWelford<V>(n, mean, m2, s_n[other], s_mean + other * V, s_m2 + other * V);
  });
  if (ty != 0 || c0 >= channels) return;
  WritePartials<V>(channels, c0, mean, m2, part_mean, part_m2);
  if (blockIdx.x == 0 && tx == 0) part_count[blockIdx.y] = n;
}

// Note [Finalize layout]: a block of kFinalizeChannels x kFinalizeLanes threads takes
// kFinalizeChannels consecutive channels; each of the kFinalizeLanes lanes takes every
// kFinalizeLanes-th row block, loading kFinalizeUnroll of them before merging any (the loads
// overlap instead of queueing behind the merges), then the lanes merge as a tree in shared
// memory (Note [Block tree], over lanes). A layer with few channels has few finalize blocks
// and many row blocks, so what counts is the length of each thread's chain of dependent
// loads and merges: few channels per block gives more blocks, and many lanes a short chain.
constexpr int kFinalizeChannels = 8;
constexpr int kFinalizeLanes = 128;
constexpr int kFinalizeUnroll = 4;

__global__ void StatisticsFinalizeKernel(const float* __restrict__ part_mean,
                                         const float* __restrict__ part_m2,
                                         const float* __restrict__ part_count, int row_blocks,
                                         int channels, float eps, float momentum,
                                         const float* __restrict__ weight, float* running_mean,
                                         float* running_var, float* mean_out, float* invstd_out,
                                         float* scale_out) {
  __shared__ float s_n[kFinalizeLanes][kFinalizeChannels];
  __shared__ float s_mean[kFinalizeLanes][kFinalizeChannels];
  __shared__ float s_m2[kFinalizeLanes][kFinalizeChannels];
  const int tx = threadIdx.x, lane = threadIdx.y;
  const int c = blockIdx.x * kFinalizeChannels + tx;
  float n = 0.f, mean[1] = {0.f}, m2[1] = {0.f};
  if (c < channels) {
    for (int b0 = lane; b0 < row_blocks; b0 += kFinalizeUnroll * kFinalizeLanes) {
      float nb[kFinalizeUnroll], mb[kFinalizeUnroll], m2b[kFinalizeUnroll];
#pragma unroll
      for (int u = 0; u < kFinalizeUnroll; ++u) {
        const int b = b0 + u * kFinalizeLanes;
        const bool in = b < row_blocks;
        nb[u] = in ? part_count[b] : 0.f;
        mb[u] = in ? part_mean[static_cast<int64_t>(b) * channels + c] : 0.f;
        m2b[u] = in ? part_m2[static_cast<int64_t>(b) * channels + c] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kFinalizeUnroll; ++u)
        MergeWelford<1>(n, mean, m2, nb[u], &mb[u], &m2b[u]);
    }
  }
  auto publish = [&] {
    s_n[lane][tx] = n;
    s_mean[lane][tx] = mean[0];
    s_m2[lane][tx] = m2[0];
  };
  MergeRowsAsTree(lane, kFinalizeLanes, publish, [&](int other) {
    MergeWelford<1>(n, mean, m2, s_n[other][tx], &s_mean[other][tx], &s_m2[other][tx]);
  });
  if (lane != 0 || c >= channels) return;
  const float var = m2[0] / n;
  const float invstd = rsqrtf(var + eps);
  if (running_mean != nullptr) {
    running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mean[0];
    running_var[c] = (1.f - momentum) * running_var[c] + momentum * (m2[0] / (n - 1.f));
  }
  mean_out[c] = mean[0];
  invstd_out[c] = invstd;
  scale_out[c] = weight[c] * invstd;
}

__global__ void FixedStatisticsKernel(const float* running_mean, const float* running_var,
                                      float eps, const float* weight, int channels, float* mean_out,
                                      float* invstd_out, float* scale_out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float invstd = rsqrtf(running_var[c] + eps);
  mean_out[c] = running_mean[c];
  invstd_out[c] = invstd;
  scale_out[c] = weight[c] * invstd;
}

// Each thread keeps its V channels' coefficients in registers and walks rows.
template <typename T, int V, bool kResidual, bool kRelu>
__global__ void ApplyKernel(const T* __restrict__ x, const T* __restrict__ residual,
                            T* __restrict__ y, int64_t rows, int channels,
                            const float* __restrict__ mean, const float* __restrict__ scale,
                            const float* __restrict__ bias) {
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= channels) return;
  float m[V], a[V], b[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    m[i] = mean[c0 + i];
    a[i] = scale[c0 + i];
    b[i] = bias[c0 + i];
  }
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const int64_t at = r * channels + c0;
    float v[V];
    Load<T, V>(x + at, v);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = (v[i] - m[i]) * a[i] + b[i];
    if constexpr (kResidual) {
      float z[V];
      Load<T, V>(residual + at, z);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] += z[i];
    }
    if constexpr (kRelu) {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = v[i] > 0.f ? v[i] : 0.f;
    }
    Store<T, V>(y + at, v);
  }
}

// g = dy masked by y > 0 (ReLU) for V channels of one row.
template <typename T, int V, bool kRelu>
__device__ __forceinline__ void OutputGrad(const T* dy, const T* y, float (&g)[V]) {
  Load<T, V>(dy, g);
  if constexpr (kRelu) {
    float out[V];
    Load<T, V>(y, out);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = out[i] > 0.f ? g[i] : 0.f;
  }
}

template <typename T, int V, bool kRelu, bool kResidualGrad>
__global__ void BackwardReduceKernel(const T* __restrict__ dy, const T* __restrict__ y,
                                     const T* __restrict__ x, int64_t rows, int channels,
                                     const float* __restrict__ mean, T* __restrict__ residual_grad,
                                     float* __restrict__ part_g, float* __restrict__ part_gx) {
  extern __shared__ float shared[];
  const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
  const int c0 = (blockIdx.x * TX + tx) * V;
  float sum_g[V] = {}, sum_gx[V] = {};
  if (c0 < channels) {
    float m[V];
#pragma unroll
    for (int i = 0; i < V; ++i) m[i] = mean[c0 + i];
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * TY + ty; r < rows;
         r += static_cast<int64_t>(gridDim.y) * TY) {
      const int64_t at = r * channels + c0;
      float g[V], v[V];
      OutputGrad<T, V, kRelu>(dy + at, y + at, g);
      if constexpr (kResidualGrad) Store<T, V>(residual_grad + at, g);
      Load<T, V>(x + at, v);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        sum_g[i] += g[i];
        sum_gx[i] += g[i] * (v[i] - m[i]);
      }
    }
  }
  // A tree over ty (Note [Block tree]).
  float* s_g = shared;
  float* s_gx = shared + TX * V * TY;
  const int slot = ty * TX + tx;
  auto publish = [&] {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      s_g[slot * V + i] = sum_g[i];
      s_gx[slot * V + i] = sum_gx[i];
    }
  };
  MergeRowsAsTree(ty, TY, publish, [&](int row) {
    const int other = row * TX + tx;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      sum_g[i] += s_g[other * V + i];
      sum_gx[i] += s_gx[other * V + i];
    }
  });
  if (ty != 0 || c0 >= channels) return;
  WritePartials<V>(channels, c0, sum_g, sum_gx, part_g, part_gx);
}

// Parameter gradients and x_grad = A * g + B * x + C (Note [Finalize layout]).
__global__ void BackwardFinalizeKernel(const float* __restrict__ part_g,
                                       const float* __restrict__ part_gx, int row_blocks,
                                       int channels, float rows, const float* __restrict__ mean,
                                       const float* __restrict__ invstd,
                                       const float* __restrict__ weight, bool batch_statistics,
                                       float* weight_grad, float* bias_grad,
                                       float* __restrict__ coefficients) {
  __shared__ float s_g[kFinalizeLanes][kFinalizeChannels], s_gx[kFinalizeLanes][kFinalizeChannels];
  const int tx = threadIdx.x, lane = threadIdx.y;
  const int c = blockIdx.x * kFinalizeChannels + tx;
  float g = 0.f, gx = 0.f;
  if (c < channels) {
    for (int b0 = lane; b0 < row_blocks; b0 += kFinalizeUnroll * kFinalizeLanes) {
      float gb[kFinalizeUnroll], gxb[kFinalizeUnroll];
#pragma unroll
      for (int u = 0; u < kFinalizeUnroll; ++u) {
        const int b = b0 + u * kFinalizeLanes;
        const bool in = b < row_blocks;
        gb[u] = in ? part_g[static_cast<int64_t>(b) * channels + c] : 0.f;
        gxb[u] = in ? part_gx[static_cast<int64_t>(b) * channels + c] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kFinalizeUnroll; ++u) {
        g += gb[u];
        gx += gxb[u];
      }
    }
  }
  auto publish = [&] {
    s_g[lane][tx] = g;
    s_gx[lane][tx] = gx;
  };
  MergeRowsAsTree(lane, kFinalizeLanes, publish, [&](int other) {
    g += s_g[other][tx];
    gx += s_gx[other][tx];
  });
  if (lane != 0 || c >= channels) return;
  const float s = invstd[c];
  const float dweight = gx * s;
  if (weight_grad != nullptr) weight_grad[c] = dweight;
  if (bias_grad != nullptr) bias_grad[c] = g;
  const float a = weight[c] * s;
  float b = 0.f, k = 0.f;
  if (batch_statistics) {
    b = -a * s * dweight / rows;
    k = -a * g / rows - b * mean[c];
  }
  coefficients[c] = a;
  coefficients[channels + c] = b;
  coefficients[2 * channels + c] = k;
}

template <typename T, int V, bool kRelu, bool kFromResidualGrad>
__global__ void BackwardApplyKernel(const T* __restrict__ dy, const T* __restrict__ y,
                                    const T* __restrict__ residual_grad, const T* __restrict__ x,
                                    int64_t rows, int channels,
                                    const float* __restrict__ coefficients, T* __restrict__ dx) {
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= channels) return;
  float a[V], b[V], k[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    a[i] = coefficients[c0 + i];
    b[i] = coefficients[channels + c0 + i];
    k[i] = coefficients[2 * channels + c0 + i];
  }
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const int64_t at = r * channels + c0;
    float g[V], v[V];
    if constexpr (kFromResidualGrad) {
      Load<T, V>(residual_grad + at, g);
    } else {
      OutputGrad<T, V, kRelu>(dy + at, y + at, g);
    }
    Load<T, V>(x + at, v);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = a[i] * g[i] + b[i] * v[i] + k[i];
    Store<T, V>(dx + at, v);
  }
}

// Grid for the row-walking elementwise kernels: enough row blocks to fill the GPU a few
// times over, each thread taking several rows.
dim3 ElementwiseGrid(ChannelRows s, const Plan& p) {
  const int64_t row_groups = (s.rows + p.ty - 1) / p.ty;
  const int64_t per_thread = 4;
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>((row_groups + per_thread - 1) / per_thread, 65535));
  return dim3(p.channel_tiles, static_cast<unsigned>(blocks));
}

int FinalizeBlocks(ChannelRows s) {
  return (s.channels + kFinalizeChannels - 1) / kFinalizeChannels;
}

}  // namespace

int64_t BatchNormScratchFloats(ChannelRows shape) {
  // The scalar plan has the most row blocks (fewest channels per block).
  int64_t most = 0;
  for (int vec : {1, 4, 8}) {
    const Plan p = MakePlan(shape, vec);
    most = std::max<int64_t>(
        most, 2 * static_cast<int64_t>(p.row_blocks) * shape.channels + p.row_blocks);
  }
  return most + 3 * static_cast<int64_t>(shape.channels);
}

cudaError_t LaunchBatchNormStatistics(const void* x, ElementType type, ChannelRows shape, float eps,
                                      float momentum, const float* weight, float* running_mean,
                                      float* running_var, float* mean, float* invstd, float* scale,
                                      float* scratch, cudaStream_t stream) {
  const Plan p = MakePlan(shape, VectorWidth(type, shape.channels, {x}));
  const Scratch s = Carve(scratch, shape, p);
  cudaError_t e = Dispatch(type, p.vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    StatisticsKernel<T, V><<<dim3(p.channel_tiles, p.row_blocks), dim3(p.tx, p.ty),
                             ReductionSharedBytes(p), stream>>>(
        static_cast<const T*>(x), shape.rows, shape.channels, s.first, s.second, s.count);
    return cudaGetLastError();
  });
  if (e != cudaSuccess) return e;
  StatisticsFinalizeKernel<<<FinalizeBlocks(shape), dim3(kFinalizeChannels, kFinalizeLanes), 0,
                             stream>>>(s.first, s.second, s.count, p.row_blocks, shape.channels,
                                       eps, momentum, weight, running_mean, running_var, mean,
                                       invstd, scale);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormFixedStatistics(const float* running_mean, const float* running_var,
                                           float eps, const float* weight, int channels,
                                           float* mean, float* invstd, float* scale,
                                           cudaStream_t stream) {
  FixedStatisticsKernel<<<(channels + 255) / 256, 256, 0, stream>>>(
      running_mean, running_var, eps, weight, channels, mean, invstd, scale);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormApply(const void* x, const void* residual, void* y, ElementType type,
                                 ChannelRows shape, const float* mean, const float* scale,
                                 const float* bias, bool relu, cudaStream_t stream) {
  const Plan p = MakePlan(shape, VectorWidth(type, shape.channels, {x, residual, y}));
  const dim3 grid = ElementwiseGrid(shape, p), block(p.tx, p.ty);
  return Dispatch(type, p.vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    const T* in = static_cast<const T*>(x);
    const T* z = static_cast<const T*>(residual);
    T* out = static_cast<T*>(y);
    if (residual != nullptr && relu) {
      ApplyKernel<T, V, true, true>
          <<<grid, block, 0, stream>>>(in, z, out, shape.rows, shape.channels, mean, scale, bias);
    } else if (residual != nullptr) {
      ApplyKernel<T, V, true, false>
          <<<grid, block, 0, stream>>>(in, z, out, shape.rows, shape.channels, mean, scale, bias);
    } else if (relu) {
      ApplyKernel<T, V, false, true>
          <<<grid, block, 0, stream>>>(in, z, out, shape.rows, shape.channels, mean, scale, bias);
    } else {
      ApplyKernel<T, V, false, false>
          <<<grid, block, 0, stream>>>(in, z, out, shape.rows, shape.channels, mean, scale, bias);
    }
    return cudaGetLastError();
  });
}

cudaError_t LaunchBatchNormBackward(const void* dy, const void* y, const void* x, ElementType type,
                                    ChannelRows shape, const float* mean, const float* invstd,
                                    const float* weight, bool relu, bool batch_statistics,
                                    void* x_grad, void* residual_grad, float* weight_grad,
                                    float* bias_grad, float* scratch, cudaStream_t stream) {
  const Plan p =
      MakePlan(shape, VectorWidth(type, shape.channels, {dy, y, x, x_grad, residual_grad}));
  const Scratch s = Carve(scratch, shape, p);
  cudaError_t e = Dispatch(type, p.vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    const dim3 grid(p.channel_tiles, p.row_blocks), block(p.tx, p.ty);
    const size_t shared = ReductionSharedBytes(p);
    const T *d = static_cast<const T*>(dy), *out = static_cast<const T*>(y),
            *in = static_cast<const T*>(x);
    T* rg = static_cast<T*>(residual_grad);
    const int64_t rows = shape.rows;
    const int c = shape.channels;
    if (relu && rg != nullptr) {
      BackwardReduceKernel<T, V, true, true>
          <<<grid, block, shared, stream>>>(d, out, in, rows, c, mean, rg, s.first, s.second);
    } else if (relu) {
      BackwardReduceKernel<T, V, true, false>
          <<<grid, block, shared, stream>>>(d, out, in, rows, c, mean, rg, s.first, s.second);
    } else if (rg != nullptr) {
      BackwardReduceKernel<T, V, false, true>
          <<<grid, block, shared, stream>>>(d, out, in, rows, c, mean, rg, s.first, s.second);
    } else {
      BackwardReduceKernel<T, V, false, false>
          <<<grid, block, shared, stream>>>(d, out, in, rows, c, mean, rg, s.first, s.second);
    }
    return cudaGetLastError();
  });
  if (e != cudaSuccess) return e;
  BackwardFinalizeKernel<<<FinalizeBlocks(shape), dim3(kFinalizeChannels, kFinalizeLanes), 0,
                           stream>>>(s.first, s.second, p.row_blocks, shape.channels,
                                     static_cast<float>(shape.rows), mean, invstd, weight,
                                     batch_statistics, weight_grad, bias_grad, s.coefficients);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  if (x_grad == nullptr) return cudaSuccess;
  return Dispatch(type, p.vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    const dim3 grid = ElementwiseGrid(shape, p), block(p.tx, p.ty);
    const T *d = static_cast<const T*>(dy), *out = static_cast<const T*>(y),
            *in = static_cast<const T*>(x), *rg = static_cast<const T*>(residual_grad);
    T* dx = static_cast<T*>(x_grad);
    const int64_t rows = shape.rows;
    const int c = shape.channels;
    if (rg != nullptr) {
      BackwardApplyKernel<T, V, false, true>
          <<<grid, block, 0, stream>>>(d, out, rg, in, rows, c, s.coefficients, dx);
    } else if (relu) {
      BackwardApplyKernel<T, V, true, false>
          <<<grid, block, 0, stream>>>(d, out, rg, in, rows, c, s.coefficients, dx);
    } else {
      BackwardApplyKernel<T, V, false, false>
          <<<grid, block, 0, stream>>>(d, out, rg, in, rows, c, s.coefficients, dx);
    }
    return cudaGetLastError();
  });
}

}  // namespace stoker::trainer
