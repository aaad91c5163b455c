// The ElementType (common/element_type.h) of a libtorch dtype, for the libtorch side of
// Stoker's kernels and collectives, where a tensor becomes a pointer, a count and an
// ElementType.
#ifndef STOKER_COMMON_TORCH_ELEMENT_TYPE_H_
#define STOKER_COMMON_TORCH_ELEMENT_TYPE_H_

#include <c10/core/ScalarType.h>

#include <optional>

#include "common/element_type.h"

namespace stoker {

// kFloat32, kFloat16 or kBFloat16 for at::kFloat, at::kHalf or at::kBFloat16; nullopt for
// every other dtype (callers name what they refuse).
std::optional<ElementType> FloatingElementType(at::ScalarType dtype);

}  // namespace stoker

#endif  // STOKER_COMMON_TORCH_ELEMENT_TYPE_H_
