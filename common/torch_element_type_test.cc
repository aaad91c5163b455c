#include "common/torch_element_type.h"

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(FloatingElementTypeTest, MapsTheThreeFloatingDtypes) {
  EXPECT_EQ(FloatingElementType(at::kFloat), ElementType::kFloat32);
  EXPECT_EQ(FloatingElementType(at::kHalf), ElementType::kFloat16);
  EXPECT_EQ(FloatingElementType(at::kBFloat16), ElementType::kBFloat16);
}

TEST(FloatingElementTypeTest, RefusesOtherDtypes) {
  EXPECT_EQ(FloatingElementType(at::kDouble), std::nullopt);
  EXPECT_EQ(FloatingElementType(at::kLong), std::nullopt);
  EXPECT_EQ(FloatingElementType(at::kByte), std::nullopt);
}

}  // namespace
}  // namespace stoker
