// Tests of Fp8LinearState on the CPU: the recipe's limits, the state's sizes, its initial
// values where it is placed, a move that keeps the values, and priming (Note [FP8 scaling
// state in checkpoints]).
#include "trainer/nn/fp8_state.h"

#include <ATen/ATen.h>

#include <vector>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(Fp8StateTest, KeepsItsNameAndRecipe) {
  const Fp8LinearState state(Fp8Recipe{8, 1, true}, "encoder.layers.0.mlp.0.weight");
  EXPECT_EQ(state.name(), "encoder.layers.0.mlp.0.weight");
  EXPECT_EQ(state.recipe().history, 8);
  EXPECT_EQ(state.recipe().margin, 1);
  EXPECT_TRUE(state.recipe().e4m3_gradients);
  EXPECT_FALSE(state.scaling().defined());
  EXPECT_FALSE(state.scale(Fp8Role::kInput).defined());
}

TEST(Fp8StateTest, RecipeLimitsAreChecked) {
  EXPECT_THROW(Fp8LinearState(Fp8Recipe{0, 0, false}), c10::Error);
  EXPECT_THROW(Fp8LinearState(Fp8Recipe{1025, 0, false}), c10::Error);
  EXPECT_THROW(Fp8LinearState(Fp8Recipe{16, -1, false}), c10::Error);
  EXPECT_NO_THROW(Fp8LinearState(Fp8Recipe{1024, 2, true}));
}

TEST(Fp8StateTest, ScalingIsThreeRolesOfHistoryPlusThreeFloats) {
  EXPECT_EQ(Fp8LinearState::ScalingSizes(Fp8Recipe{}), (std::vector<int64_t>{3, 19}));
  EXPECT_EQ(Fp8LinearState::ScalingSizes(Fp8Recipe{32, 0, false}), (std::vector<int64_t>{3, 35}));
}

TEST(Fp8StateTest, PlacedStateStartsUnscaledAndUnprimed) {
  Fp8LinearState state(Fp8Recipe{4, 0, false}, "fc1.weight");
  state.PlaceOn(at::kCPU);
  ASSERT_TRUE(state.scaling().defined());
  EXPECT_EQ(state.scaling().sizes().vec(), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(state.scaling().scalar_type(), at::kFloat);
  for (Fp8Role role : {Fp8Role::kInput, Fp8Role::kWeight, Fp8Role::kGradOutput}) {
    EXPECT_EQ(state.scale(role).item<float>(), 1.0f);
    EXPECT_TRUE(at::equal(state.amax_history(role), at::zeros({4})));
    EXPECT_FALSE(state.primed(role));
  }
  // The inverse scales are 1 too; the amax accumulators 0.
  EXPECT_TRUE(at::equal(state.scaling().select(1, 6), at::ones({3})));
  EXPECT_TRUE(at::equal(state.scaling().select(1, 4), at::zeros({3})));
}

TEST(Fp8StateTest, PlacingAgainKeepsTheValuesAndTheTensor) {
  Fp8LinearState state(Fp8Recipe{4, 0, false});
  state.PlaceOn(at::kCPU);
  const at::Tensor before = state.scaling();
  before.copy_(at::arange(21, at::kFloat).reshape({3, 7}));
  state.PlaceOn(at::kCPU);
  EXPECT_TRUE(state.scaling().is_same(before));
  EXPECT_TRUE(at::equal(state.scaling(), at::arange(21, at::kFloat).reshape({3, 7})));
  EXPECT_TRUE(state.DeviceState(at::kCPU).is_same(before));
}

TEST(Fp8StateTest, MarkPrimedPrimesEveryRole) {
  Fp8LinearState state;
  state.primed(Fp8Role::kWeight) = true;
  state.MarkPrimed();
  for (Fp8Role role : {Fp8Role::kInput, Fp8Role::kWeight, Fp8Role::kGradOutput}) {
    EXPECT_TRUE(state.primed(role));
  }
}

}  // namespace
}  // namespace stoker::trainer
