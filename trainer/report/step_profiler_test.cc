// The host-clock profiler attributes each interval to the phase that ends it.
#include "trainer/report/step_profiler.h"

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Sleeping takes at least the time asked for, and on a loaded machine (a sanitizer build,
// other builds) sometimes much more: so each phase gets a length of its own, the bounds allow
// no undershoot and 100 ms of overshoot, and the lengths are further apart than that, so an
// interval given to the wrong phase still fails.
void ExpectPhaseSeconds(const StepProfiler& p, StepPhase phase, double seconds) {
  EXPECT_GE(p.MeanSeconds(phase), seconds - 0.001) << StepPhaseName(phase);
  EXPECT_LT(p.MeanSeconds(phase), seconds + 0.100) << StepPhaseName(phase);
}

TEST(StepProfilerTest, IntervalsGoToThePhaseThatEndsThem) {
  auto profiler = StepProfiler::Create(/*cuda=*/false, nullptr, 0);
  ASSERT_TRUE(profiler.ok());
  StepProfiler& p = **profiler;
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(p.StartStep().ok());
    Sleep(20);
    ASSERT_TRUE(p.Mark(StepPhase::kHostToDevice).ok());
    Sleep(150);
    ASSERT_TRUE(p.Mark(StepPhase::kForward).ok());
    Sleep(420);
    ASSERT_TRUE(p.Mark(StepPhase::kBackward).ok());
    p.MoveHostSeconds(StepPhase::kBackward, StepPhase::kAllreduceWait, 0.02);
    p.AddHostSeconds(StepPhase::kDataWait, 0.005);
    ASSERT_TRUE(p.EndStep().ok());
  }
  EXPECT_EQ(p.steps(), 2);
  ExpectPhaseSeconds(p, StepPhase::kHostToDevice, 0.020);
  ExpectPhaseSeconds(p, StepPhase::kForward, 0.150);
  ExpectPhaseSeconds(p, StepPhase::kBackward, 0.400);
  EXPECT_NEAR(p.MeanSeconds(StepPhase::kAllreduceWait), 0.020, 1e-9);
  EXPECT_NEAR(p.MeanSeconds(StepPhase::kDataWait), 0.005, 1e-9);
  EXPECT_EQ(p.MeanSeconds(StepPhase::kOptimizer), 0);
  EXPECT_TRUE(absl::StrContains(p.Report(), "allreduce_wait")) << p.Report();
}

TEST(StepProfilerTest, MarksOutsideAStepAreIgnored) {
  auto profiler = StepProfiler::Create(/*cuda=*/false, nullptr, 0);
  ASSERT_TRUE((*profiler)->Mark(StepPhase::kForward).ok());
  ASSERT_TRUE((*profiler)->EndStep().ok());
  EXPECT_EQ((*profiler)->steps(), 0);
}

}  // namespace
}  // namespace stoker::trainer
