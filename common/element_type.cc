#include "common/element_type.h"

namespace stoker {

size_t ElementSize(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return 4;
    case ElementType::kFloat16:
    case ElementType::kBFloat16:
      return 2;
    case ElementType::kInt64:
      return 8;
    case ElementType::kUInt8:
      return 1;
  }
  return 0;
}

}  // namespace stoker
