#include "common/element_type.h"

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(ElementTypeTest, SizesAreTheTypesBytes) {
  EXPECT_EQ(ElementSize(ElementType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(ElementType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(ElementType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(ElementType::kInt64), 8u);
  EXPECT_EQ(ElementSize(ElementType::kUInt8), 1u);
}

}  // namespace
}  // namespace stoker
