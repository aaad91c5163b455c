#include "trainer/input/normalize_kernel.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_conversions.cuh"

namespace stoker::trainer {
namespace {

struct ChannelAffine {
  float scale[3];  // 1 / (255 * stddev)
  float shift[3];  // -mean / stddev
};

// Each thread takes 4 pixels: 12 input bytes as three 4-byte loads (the channel pattern
// repeats every 12 bytes), 12 outputs written as three 8-byte (bf16, fp16) or 16-byte
// (fp32) stores: one store per output element left a warp's stores 12 times as many and
// each touching a 768-byte span. The tail (pixels % 4) is done one byte at a time by the
// threads past the vector part.
// 12 outputs at `out`, which is 24-byte (2-byte types) or 48-byte (float) aligned.
template <typename T>
__device__ __forceinline__ void Store12(T* out, const T (&v)[12]) {
  static_assert(sizeof(T) == 2, "2-byte types: three 8-byte stores");
  const uint2* src = reinterpret_cast<const uint2*>(v);
  uint2* dst = reinterpret_cast<uint2*>(out);
  dst[0] = src[0];
  dst[1] = src[1];
  dst[2] = src[2];
}
__device__ __forceinline__ void Store12(float* out, const float (&v)[12]) {
  const float4* src = reinterpret_cast<const float4*>(v);
  float4* dst = reinterpret_cast<float4*>(out);
  dst[0] = src[0];
  dst[1] = src[1];
  dst[2] = src[2];
}

template <typename T>
__global__ void NormalizeKernel(const uint8_t* __restrict__ in, T* __restrict__ out, int64_t pixels,
                                ChannelAffine affine) {
  const int64_t groups = pixels / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += stride) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(in + g * 12);
    uint32_t w[3] = {words[0], words[1], words[2]};
    alignas(16) T o[12];
#pragma unroll
    for (int i = 0; i < 12; ++i) {
      const float v = static_cast<float>((w[i / 4] >> (8 * (i % 4))) & 0xFF);
      o[i] = FromFloat<T>(v * affine.scale[i % 3] + affine.shift[i % 3]);
    }
    Store12(out + g * 12, o);
  }
  const int64_t tail_begin = groups * 12, total = pixels * 3;
  for (int64_t i = tail_begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += stride) {
    const int c = static_cast<int>(i % 3);
    out[i] = FromFloat<T>(static_cast<float>(in[i]) * affine.scale[c] + affine.shift[c]);
  }
}

}  // namespace

cudaError_t LaunchNormalizeU8(const uint8_t* in, void* out, int64_t pixels, NormalizedType type,
                              const float mean[3], const float stddev[3], cudaStream_t stream) {
  // The vector loads need 4-byte alignment of every 12-byte group.
  if (reinterpret_cast<uintptr_t>(in) % 4 != 0) return cudaErrorMisalignedAddress;
  // The vector stores need 8-byte (16-byte for fp32) alignment of every 12-value group.
  if (reinterpret_cast<uintptr_t>(out) % 16 != 0) return cudaErrorMisalignedAddress;
  if (pixels <= 0) return cudaSuccess;
  ChannelAffine affine;
  for (int c = 0; c < 3; ++c) {
    affine.scale[c] = 1.0f / (255.0f * stddev[c]);
    affine.shift[c] = -mean[c] / stddev[c];
  }
  constexpr int kThreads = 256;
  const int64_t work = pixels / 4 + pixels % 4 * 3;
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 65536));
  switch (type) {
    case NormalizedType::kFloat32:
      NormalizeKernel<float>
          <<<blocks, kThreads, 0, stream>>>(in, static_cast<float*>(out), pixels, affine);
      break;
    case NormalizedType::kFloat16:
      NormalizeKernel<__half>
          <<<blocks, kThreads, 0, stream>>>(in, static_cast<__half*>(out), pixels, affine);
      break;
    case NormalizedType::kBFloat16:
      NormalizeKernel<__nv_bfloat16>
          <<<blocks, kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), pixels, affine);
      break;
  }
  return cudaGetLastError();
}

}  // namespace stoker::trainer
