#include "trainer/nn/fp8_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace stoker::trainer {
namespace {

constexpr int kWarp = 32;
constexpr int kTile = 64;   // a block casts a kTile x kTile tile
constexpr int kVector = 8;  // elements a thread reads, converts and writes at once
constexpr int kCastThreads = 256;
constexpr int kMaxHistory = 1024;

__device__ __forceinline__ void Load8(const float* p, float v[kVector]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float v[kVector]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
  for (int i = 0; i < kVector; ++i) v[i] = __bfloat162float(h[i]);
}

__device__ __forceinline__ void Load8(const __half* p, float v[kVector]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half* h = reinterpret_cast<const __half*>(&raw);
  for (int i = 0; i < kVector; ++i) v[i] = __half2float(h[i]);
}

// Eight values times `scale`, saturated to the format's finite range, as eight bytes (the
// first value in the lowest byte).
__device__ __forceinline__ uint2 Convert8(const float v[kVector], float scale,
                                          __nv_fp8_interpretation_t kind) {
  unsigned int pairs[4];
  for (int i = 0; i < 4; ++i) {
    pairs[i] = __nv_cvt_float2_to_fp8x2(make_float2(v[2 * i] * scale, v[2 * i + 1] * scale),
                                        __NV_SATFINITE, kind);
  }
  return make_uint2(pairs[0] | (pairs[1] << 16), pairs[2] | (pairs[3] << 16));
}

// One kTile x kTile tile per block: rows from blockIdx.x, columns from blockIdx.y. The tile
// goes through shared memory so that both q and its transpose are written in whole rows.
// amax is kept as the bits of non-negative floats, whose integer order is their order (NaN
// above infinity).
template <typename T>
__global__ void CastKernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                           const float* __restrict__ scale_ptr, __nv_fp8_interpretation_t kind,
                           uint8_t* __restrict__ q, uint8_t* __restrict__ qt, int64_t padded_rows,
                           float* __restrict__ amax, float* __restrict__ scale_inv) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile + kVector];
  __shared__ int warp_max[kCastThreads / kWarp];
  const float scale = *scale_ptr;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  constexpr int kVectorsPerRow = kTile / kVector;
  int local_max = 0;
  for (int j = threadIdx.x; j < kTile * kVectorsPerRow; j += kCastThreads) {
    const int r = j / kVectorsPerRow, v = j % kVectorsPerRow;
    const int64_t row = r0 + r, col = c0 + v * kVector;
    uint2 packed = make_uint2(0, 0);
    if (row < rows && col < cols) {
      float f[kVector];
      Load8(x + row * cols + col, f);
      for (int i = 0; i < kVector; ++i) local_max = max(local_max, __float_as_int(fabsf(f[i])));
      if (q != nullptr || qt != nullptr) packed = Convert8(f, scale, kind);
      if (q != nullptr) *reinterpret_cast<uint2*>(q + row * cols + col) = packed;
    }
    *reinterpret_cast<uint2*>(&tile[r][v * kVector]) = packed;
  }
  if (qt != nullptr) {
    __syncthreads();
    for (int j = threadIdx.x; j < kTile * kVectorsPerRow; j += kCastThreads) {
      const int c = j / kVectorsPerRow, chunk = j % kVectorsPerRow;
      const int64_t col = c0 + c, row = r0 + chunk * kVector;
      if (col >= cols || row >= padded_rows) continue;
      unsigned int lo = 0, hi = 0;
      for (int k = 0; k < 4; ++k) {
        lo |= static_cast<unsigned int>(tile[chunk * kVector + k][c]) << (8 * k);
        hi |= static_cast<unsigned int>(tile[chunk * kVector + 4 + k][c]) << (8 * k);
      }
      *reinterpret_cast<uint2*>(qt + col * padded_rows + row) = make_uint2(lo, hi);
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    local_max = max(local_max, __shfl_xor_sync(0xffffffff, local_max, offset));
  if (threadIdx.x % kWarp == 0) warp_max[threadIdx.x / kWarp] = local_max;
  __syncthreads();
  if (threadIdx.x == 0) {
    int m = 0;
    for (int w = 0; w < kCastThreads / kWarp; ++w) m = max(m, warp_max[w]);
    if (m > 0) atomicMax(reinterpret_cast<int*>(amax), m);
    if (scale_inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0) *scale_inv = 1.f / scale;
  }
}

struct MaxValues {
  float value[3];
};

// One block per role row; thread i holds history entry i.
__global__ void UpdateKernel(float* __restrict__ scaling, int history, int first_row,
                             MaxValues max_values, int margin) {
  __shared__ float old[kMaxHistory];
  __shared__ float warp_max[kMaxHistory / kWarp];
  const int role = first_row + blockIdx.x;
  float* row = scaling + static_cast<int64_t>(role) * (history + 3);
  const int i = threadIdx.x;
  const float current = row[history];
  if (i < history) old[i] = row[i];
  __syncthreads();
  float v = 0.f;
  if (i < history) {
    v = i == 0 ? (isfinite(current) ? current : 0.f) : old[i - 1];
    row[i] = v;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
  if (i % kWarp == 0) warp_max[i / kWarp] = v;
  __syncthreads();
  if (i == 0) {
    float m = 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) m = fmaxf(m, warp_max[w]);
    row[history] = 0.f;
    if (m > 0.f && isfinite(m)) {
      const float scale = max_values.value[role] / ldexpf(m, margin);
      if (isfinite(scale) && scale > 0.f) {
        row[history + 1] = scale;
        row[history + 2] = 1.f / scale;
      }
    }
  }
}

}  // namespace

cudaError_t LaunchFp8Cast(const Fp8CastArguments& a, cudaStream_t stream) {
  if (a.cols % kVector != 0 ||
      (a.qt != nullptr && (a.padded_rows % 16 != 0 || a.padded_rows < a.rows))) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = a.qt != nullptr ? a.padded_rows : a.rows;
  if (rows == 0 || a.cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned int>((rows + kTile - 1) / kTile),
                  static_cast<unsigned int>((a.cols + kTile - 1) / kTile));
  const __nv_fp8_interpretation_t kind = a.format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  switch (a.type) {
    case ElementType::kFloat32:
      CastKernel<<<grid, kCastThreads, 0, stream>>>(static_cast<const float*>(a.x), a.rows, a.cols,
                                                    a.scale, kind, a.q, a.qt, a.padded_rows, a.amax,
                                                    a.scale_inv);
      break;
    case ElementType::kBFloat16:
      CastKernel<<<grid, kCastThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a.x), a.rows,
                                                    a.cols, a.scale, kind, a.q, a.qt, a.padded_rows,
                                                    a.amax, a.scale_inv);
      break;
    case ElementType::kFloat16:
      CastKernel<<<grid, kCastThreads, 0, stream>>>(static_cast<const __half*>(a.x), a.rows, a.cols,
                                                    a.scale, kind, a.q, a.qt, a.padded_rows, a.amax,
                                                    a.scale_inv);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchFp8ScaleUpdate(float* scaling, int history, int first_row, int roles,
                                 const float max_value[3], int margin, cudaStream_t stream) {
  if (history < 1 || history > kMaxHistory || roles < 1 || first_row < 0 || first_row + roles > 3)
    return cudaErrorInvalidValue;
  const MaxValues values{{max_value[0], max_value[1], max_value[2]}};
  const int threads = (history + kWarp - 1) / kWarp * kWarp;
  UpdateKernel<<<roles, threads, 0, stream>>>(scaling, history, first_row, values, margin);
  return cudaGetLastError();
}

}  // namespace stoker::trainer
