#include "common/decode_share.h"

#include <string>

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(GpuDecodeShareTest, FlagIsAutoOrAShare) {
  auto automatic = ParseGpuDecodeShare("auto");
  ASSERT_TRUE(automatic.ok());
  EXPECT_FALSE(automatic->has_value());
  auto quarter = ParseGpuDecodeShare("0.25");
  ASSERT_TRUE(quarter.ok());
  EXPECT_EQ(**quarter, 0.25);
  auto zero = ParseGpuDecodeShare("-0");
  ASSERT_TRUE(zero.ok());  // negative zero is zero
  EXPECT_EQ(**zero, 0.0);
  for (const char* bad : {"", "half", "most", "1.5", "1.01", "-0.1", "nan", "0.5x"}) {
    auto parsed = ParseGpuDecodeShare(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              std::string("--gpu_decode_share=") + bad + ": must be auto or a number in [0, 1]");
  }
}

}  // namespace
}  // namespace stoker
