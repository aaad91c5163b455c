#include "common/torch_element_type.h"

namespace stoker {

std::optional<ElementType> FloatingElementType(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return ElementType::kFloat32;
    case at::kHalf:
      return ElementType::kFloat16;
    case at::kBFloat16:
      return ElementType::kBFloat16;
    default:
      return std::nullopt;
  }
}

}  // namespace stoker
