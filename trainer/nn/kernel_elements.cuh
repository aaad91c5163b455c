// Element access shared by Stoker's CUDA kernels (fused_kernels.cu, max_pool_kernels.cu;
// layer_norm_kernels.cu uses the dispatch on the element type):
// loads and stores of V consecutive elements as one access (converted to and from fp32 by
// common/element_conversions.cuh: arithmetic is fp32 throughout), and the host-side choice
// of V with the dispatch on the element type. Included by .cu files only (nvcc).
#ifndef STOKER_TRAINER_NN_KERNEL_ELEMENTS_CUH_
#define STOKER_TRAINER_NN_KERNEL_ELEMENTS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "common/element_conversions.cuh"
#include "trainer/nn/fused_kernels.h"

namespace stoker::trainer::internal {

// V consecutive elements as one access: 16 bytes when V * sizeof(T) == 16, else scalar.
template <typename T, int V>
__device__ __forceinline__ void Load(const T* p, float (&out)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = ToFloat(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = ToFloat(p[i]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void Store(T* p, const float (&in)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = FromFloat<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = FromFloat<T>(in[i]);
  }
}

// The vector width V for `channels` of `type` at `pointers` (null ones ignored): 16 bytes
// where the channels divide into them and every pointer is 16-byte aligned, else 1.
inline int VectorWidth(ElementType type, int channels,
                       std::initializer_list<const void*> pointers) {
  const int vec = type == ElementType::kFloat32 ? 4 : 8;
  if (channels % vec != 0) return 1;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  }
  return vec;
}

// Calls f(T{}, std::integral_constant<int, V>{}) for the element type and vector width.
template <typename F>
cudaError_t Dispatch(ElementType type, int vec, F&& f) {
  switch (type) {
    case ElementType::kFloat32:
      return vec == 1 ? f(float{}, std::integral_constant<int, 1>{})
                      : f(float{}, std::integral_constant<int, 4>{});
    case ElementType::kFloat16:
      return vec == 1 ? f(__half{}, std::integral_constant<int, 1>{})
                      : f(__half{}, std::integral_constant<int, 8>{});
    case ElementType::kBFloat16:
      return vec == 1 ? f(__nv_bfloat16{}, std::integral_constant<int, 1>{})
                      : f(__nv_bfloat16{}, std::integral_constant<int, 8>{});
    case ElementType::kInt64:
    case ElementType::kUInt8:
      break;  // not a type of the fused kernels
  }
  return cudaErrorInvalidValue;
}

}  // namespace stoker::trainer::internal

#endif  // STOKER_TRAINER_NN_KERNEL_ELEMENTS_CUH_
