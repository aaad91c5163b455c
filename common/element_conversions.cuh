// Conversions of the floating element types of common/element_type.h (fp32, fp16, bf16) to
// and from fp32 on the device, where Stoker's CUDA kernels do their arithmetic (the fused
// kernels of trainer/nn, the input normalisation of trainer/input). Included by .cu files
// only (nvcc).
#ifndef STOKER_COMMON_ELEMENT_CONVERSIONS_CUH_
#define STOKER_COMMON_ELEMENT_CONVERSIONS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace stoker {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// Rounds to nearest even.
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace stoker

#endif  // STOKER_COMMON_ELEMENT_CONVERSIONS_CUH_
