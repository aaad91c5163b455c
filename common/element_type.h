// ElementType: the element types of the raw tensors that Stoker's own kernels
// (trainer/nn/fused_kernels.h) and collectives (trainer/comm/communicator.h) take, where a
// pointer and a count stand for a tensor. Free of CUDA and libtorch, so that nvcc and host
// code read the same enum.
#ifndef STOKER_COMMON_ELEMENT_TYPE_H_
#define STOKER_COMMON_ELEMENT_TYPE_H_

#include <cstddef>

namespace stoker {

enum class ElementType { kFloat32, kFloat16, kBFloat16, kInt64, kUInt8 };

// Bytes per element of `type`.
size_t ElementSize(ElementType type);

}  // namespace stoker

#endif  // STOKER_COMMON_ELEMENT_TYPE_H_
