// The schedule's values at the points that define it.
#include "trainer/optim/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

LearningRateSchedule Make(const LrScheduleOptions& options) {
  auto schedule = LearningRateSchedule::Create(options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return *schedule;
}

// A `kind` schedule from `base_lr` over `epochs` epochs of `steps_per_epoch` steps.
LrScheduleOptions Options(LrSchedule kind, double base_lr, int64_t steps_per_epoch, int epochs) {
  return LrScheduleOptions{kind, base_lr, /*lr_min=*/0, steps_per_epoch, epochs};
}

TEST(LearningRateScheduleTest, WarmupRisesLinearlyToThePeak) {
  LrScheduleOptions o = Options(LrSchedule::kConstant, /*base_lr=*/0.4, /*steps_per_epoch=*/10,
                                /*epochs=*/5);
  o.warmup_epochs = 2;
  LearningRateSchedule s = Make(o);
  EXPECT_EQ(s.warmup_steps(), 20);
  EXPECT_DOUBLE_EQ(s.At(0), 0.4 / 20);
  EXPECT_DOUBLE_EQ(s.At(9), 0.4 * 10 / 20);
  EXPECT_DOUBLE_EQ(s.At(19), 0.4);
  EXPECT_DOUBLE_EQ(s.At(20), 0.4);
  EXPECT_DOUBLE_EQ(s.At(49), 0.4);
}

TEST(LearningRateScheduleTest, CosineFallsFromThePeakToTheFloorAfterTheWarmup) {
  LrScheduleOptions o = Options(LrSchedule::kCosine, /*base_lr=*/1.0, /*steps_per_epoch=*/10,
                                /*epochs=*/11);
  o.lr_min = 0.1;
  o.warmup_epochs = 1;
  LearningRateSchedule s = Make(o);
  EXPECT_DOUBLE_EQ(s.At(9), 1.0);                 // last warm-up step
  EXPECT_DOUBLE_EQ(s.At(10), 1.0);                // cosine starts at the peak
  EXPECT_NEAR(s.At(60), 0.1 + 0.9 * 0.5, 1e-12);  // half way
  EXPECT_NEAR(s.At(109), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 99.0 / 100)), 1e-12);
  for (int64_t t = 11; t < 110; ++t) EXPECT_LT(s.At(t), s.At(t - 1)) << t;
  EXPECT_DOUBLE_EQ(s.At(500), s.At(109));  // past the end: the last value
}

TEST(LearningRateScheduleTest, StepDecaysAtTheStartOfEachMilestoneEpoch) {
  LrScheduleOptions o = Options(LrSchedule::kStep, /*base_lr=*/0.1, /*steps_per_epoch=*/4,
                                /*epochs=*/10);
  o.step_epochs = {3, 6};
  o.gamma = 0.5;
  LearningRateSchedule s = Make(o);
  EXPECT_DOUBLE_EQ(s.At(0), 0.1);
  EXPECT_DOUBLE_EQ(s.At(11), 0.1);    // epoch 2
  EXPECT_DOUBLE_EQ(s.At(12), 0.05);   // epoch 3
  EXPECT_DOUBLE_EQ(s.At(23), 0.05);   // epoch 5
  EXPECT_DOUBLE_EQ(s.At(24), 0.025);  // epoch 6
  EXPECT_DOUBLE_EQ(s.At(39), 0.025);
}

TEST(LearningRateScheduleTest, ConstantWithoutWarmupIsTheBase) {
  LearningRateSchedule s = Make(Options(LrSchedule::kConstant, /*base_lr=*/0.3,
                                        /*steps_per_epoch=*/3, /*epochs=*/2));
  for (int64_t t = 0; t < 6; ++t) EXPECT_DOUBLE_EQ(s.At(t), 0.3);
}

TEST(LearningRateScheduleTest, RefusesAnEpochWithoutSteps) {
  LrScheduleOptions o;
  o.steps_per_epoch = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(LearningRateSchedule::Create(o).status()));
}

}  // namespace
}  // namespace stoker::trainer
