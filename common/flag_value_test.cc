#include "common/flag_value.h"

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

enum class Fruit { kApple, kPear, kPlum };

TEST(ParseFlagChoiceTest, ReturnsTheValueOfTheNamedChoice) {
  EXPECT_EQ(*ParseFlagChoice<Fruit>(
                "fruit", "pear",
                {{"apple", Fruit::kApple}, {"pear", Fruit::kPear}, {"plum", Fruit::kPlum}}),
            Fruit::kPear);
}

TEST(ParseFlagChoiceTest, ListsTheNamesInOrderWhenNoneMatches) {
  const absl::StatusOr<Fruit> three = ParseFlagChoice<Fruit>(
      "fruit", "Pear", {{"apple", Fruit::kApple}, {"pear", Fruit::kPear}, {"plum", Fruit::kPlum}});
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(three.status().message(), "--fruit=Pear: use apple, pear or plum");
  const absl::StatusOr<bool> two =
      ParseFlagChoice<bool>("data_split", "test", {{"train", true}, {"val", false}});
  EXPECT_EQ(two.status().message(), "--data_split=test: use train or val");
}

}  // namespace
}  // namespace stoker
