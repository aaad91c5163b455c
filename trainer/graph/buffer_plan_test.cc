// Tests of a program's value table: slots in the order names are first seen, parameters
// and buffers kept across runs, other values let go after one, the reads from outside the
// calls, and buffer updates.
#include "trainer/graph/buffer_plan.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(BufferPlanTest, SlotsAreGivenInTheOrderNamesAreFirstSeen) {
  BufferPlan plan;
  EXPECT_EQ(plan.SlotOf("a"), 0);
  EXPECT_EQ(plan.SlotOf("b"), 1);
  EXPECT_EQ(plan.SlotOf("a"), 0);
  EXPECT_EQ(plan.FindSlot("b"), 1);
  EXPECT_EQ(plan.FindSlot("c"), -1);
  EXPECT_EQ(plan.values().size(), 2u);
}

TEST(BufferPlanTest, BoundWeightsOutliveARunAndOtherValuesDoNot) {
  BufferPlan plan;
  at::Tensor weight = at::ones({2});
  at::Tensor mean = at::zeros({2});
  const int w = plan.BindWeight("p_weight", weight, /*is_buffer=*/false);
  const int m = plan.BindWeight("b_mean", mean, /*is_buffer=*/true);
  plan.SetInput("x");
  const int out = plan.SlotOf("out");
  EXPECT_FALSE(plan.HoldsBuffer(w));
  EXPECT_TRUE(plan.HoldsBuffer(m));
  EXPECT_FALSE(plan.HoldsBuffer(out));
  EXPECT_EQ(plan.input_slot(), 2);

  plan.values()[plan.input_slot()] = at::ones({1, 3, 4, 4});
  plan.values()[out] = at::ones({1});
  plan.ClearRunValues();
  EXPECT_TRUE(plan.values()[w].toTensor().is_same(weight));
  EXPECT_TRUE(plan.values()[m].toTensor().is_same(mean));
  EXPECT_TRUE(plan.values()[plan.input_slot()].isNone());
  EXPECT_TRUE(plan.values()[out].isNone());
}

TEST(BufferPlanTest, OutputMustBeAValueSomethingNames) {
  BufferPlan plan;
  EXPECT_FALSE(plan.SetOutput("logits"));
  plan.SlotOf("logits");
  EXPECT_TRUE(plan.SetOutput("logits"));
  EXPECT_EQ(plan.output_slot(), 0);
}

TEST(BufferPlanTest, OutsideReadsAreTheOutputThenTheBufferUpdates) {
  BufferPlan plan;
  at::Tensor count = at::zeros({}, at::kLong);
  plan.BindWeight("b_count", count, /*is_buffer=*/true);
  plan.SlotOf("logits");
  plan.AddBufferMutation("add", count);
  ASSERT_TRUE(plan.SetOutput("logits"));
  EXPECT_EQ(plan.OutsideReads(), (std::vector<int>{1, 2}));
}

TEST(BufferPlanTest, BufferMutationsCopyTheirValuesIntoTheBuffers) {
  BufferPlan plan;
  at::Tensor count = at::zeros({}, at::kLong);
  plan.BindWeight("b_count", count, /*is_buffer=*/true);
  plan.AddBufferMutation("add", count);
  plan.values()[plan.FindSlot("add")] = at::full({}, 7, at::kLong);
  plan.ApplyBufferMutations();
  EXPECT_EQ(count.item<int64_t>(), 7);
}

}  // namespace
}  // namespace stoker::trainer
