#include "common/flag_error.h"

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(FlagValueErrorTest, NamesTheFlagAndTheValue) {
  const absl::Status error = FlagValueError("batch_size", 0, "must be >= 1");
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(error.message(), "--batch_size=0: must be >= 1");
  EXPECT_EQ(FlagValueError("device", "tpu", "use auto, cuda or cpu").message(),
            "--device=tpu: use auto, cuda or cpu");
  EXPECT_EQ(FlagValueError("lr", 0.5, "must be < 0.1").message(), "--lr=0.5: must be < 0.1");
}

}  // namespace
}  // namespace stoker
