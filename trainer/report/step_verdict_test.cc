#include "trainer/report/step_verdict.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::testing::HasSubstr;

std::vector<RankPlace> ThreeRanks() { return {{0, "hosta", 0}, {1, "hosta", 0}, {2, "hostb", 1}}; }

RankStepTimes Times(double input, double copy, double compute, double comm) {
  return {input, copy, compute, comm, input + copy + compute + comm};
}

TEST(StepVerdictTest, NamesTheRankThatComputesLongestAsAStraggler) {
  const std::vector<RankStepTimes> ranks = {Times(1, 1, 20, 61), Times(1, 1, 80, 1),
                                            Times(1, 1, 21, 60)};
  const StepVerdict verdict = JudgeStep(12, ranks, ThreeRanks(), 30);
  EXPECT_EQ(verdict.bound, StepBound::kStraggler);
  EXPECT_EQ(verdict.rank, 1);
  EXPECT_EQ(verdict.host, "hosta");
  EXPECT_EQ(verdict.stage, "compute");
  EXPECT_DOUBLE_EQ(verdict.excess_ms, 80 - 20.5);
  EXPECT_DOUBLE_EQ(verdict.others_comm_ms, 61);
  EXPECT_THAT(verdict.text, HasSubstr("step 12: 83.0 ms, +53.0 ms against the median (30.0 ms)"));
  EXPECT_THAT(verdict.text,
              HasSubstr("straggler: rank 1 on hosta (node 0) spent 80.0 ms in compute"));
}

TEST(StepVerdictTest, NamesTheRankWaitingForItsDataServiceAsInput) {
  const std::vector<RankStepTimes> ranks = {Times(1, 1, 20, 40), Times(2, 1, 20, 39),
                                            Times(41, 1, 20, 0)};
  const StepVerdict verdict = JudgeStep(3, ranks, ThreeRanks(), 0);
  EXPECT_EQ(verdict.bound, StepBound::kInput);
  EXPECT_EQ(verdict.rank, 2);
  EXPECT_EQ(verdict.node, 1);
  EXPECT_EQ(verdict.stage, "input");
  EXPECT_DOUBLE_EQ(verdict.stage_ms, 41);
  EXPECT_THAT(verdict.text, HasSubstr("input: rank 2 on hostb (node 1) waited 41.0 ms for input"));
  EXPECT_THAT(verdict.text, HasSubstr("node 1's data service is behind"));
}

TEST(StepVerdictTest, NamesTheCommonStageWhenNoRankStandsOut) {
  const std::vector<RankStepTimes> ranks = {Times(1, 1, 20, 30), Times(1, 1, 21, 29),
                                            Times(1, 1, 20, 30)};
  const StepVerdict verdict = JudgeStep(0, ranks, ThreeRanks(), 0);
  EXPECT_EQ(verdict.bound, StepBound::kCommunication);
  EXPECT_EQ(verdict.rank, -1);
  EXPECT_THAT(verdict.text, HasSubstr("no rank stands out"));

  const std::vector<RankStepTimes> inputs = {Times(30, 1, 5, 1), Times(31, 1, 5, 0),
                                             Times(30, 1, 5, 1)};
  EXPECT_EQ(JudgeStep(0, inputs, ThreeRanks(), 0).bound, StepBound::kInput);
}

TEST(StepVerdictTest, OneRankIsJudgedByItsLargestStage) {
  const StepVerdict verdict = JudgeStep(0, {Times(1, 2, 30, 0)}, {{0, "h", 0}}, 0);
  EXPECT_EQ(verdict.bound, StepBound::kCompute);
  EXPECT_EQ(verdict.rank, -1);
}

TEST(StepVerdictTest, SmallDifferencesAreNoStraggler) {
  const std::vector<RankStepTimes> ranks = {Times(1, 1, 20, 2), Times(1, 1, 21.5, 0.5),
                                            Times(1, 1, 20, 2)};
  EXPECT_EQ(JudgeStep(0, ranks, ThreeRanks(), 0).rank, -1);
}

TEST(MedianTest, OfOddEvenAndEmpty) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 2, 3}), 2.5);
}

TEST(VerdictSummaryTest, NamesTheMostCommonBoundAndCulprit) {
  VerdictSummary summary;
  const std::vector<RankStepTimes> slow1 = {Times(1, 1, 20, 61), Times(1, 1, 80, 1),
                                            Times(1, 1, 21, 60)};
  const std::vector<RankStepTimes> even = {Times(1, 1, 20, 2), Times(1, 1, 20, 2),
                                           Times(1, 1, 20, 2)};
  summary.Add(JudgeStep(0, slow1, ThreeRanks(), 0));
  summary.Add(JudgeStep(1, slow1, ThreeRanks(), 0));
  summary.Add(JudgeStep(2, even, ThreeRanks(), 0));
  EXPECT_EQ(summary.steps(), 3);
  EXPECT_EQ(summary.bound(), StepBound::kStraggler);
  EXPECT_EQ(summary.culprit_rank(), 1);
  EXPECT_EQ(summary.culprit_stage(), "compute");
  EXPECT_DOUBLE_EQ(summary.culprit_excess_ms(), 59.5);
  EXPECT_THAT(summary.Text(), HasSubstr("trace verdict over 3 steps: bound by straggler "
                                        "(compute 1, straggler 2)"));
  EXPECT_THAT(summary.Text(), HasSubstr("rank 1 on hosta (node 0), compute, 59.5 ms"));
}

TEST(VerdictSummaryTest, EmptySummaryHasNoCulprit) {
  VerdictSummary summary;
  EXPECT_EQ(summary.culprit_rank(), -1);
  EXPECT_THAT(summary.Text(), HasSubstr("over 0 steps"));
}

}  // namespace
}  // namespace stoker::trainer
