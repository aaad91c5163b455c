// ShareControlledFeeder over a fake feeder whose batches take the share last requested,
// with a fake clock: the requests reach the ring, and the gauge says what is in use.
#include "trainer/input/share_controlled_feeder.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

// Batches of 256 that arrive with `share()` after waiting 30% of their 20 ms.
class FakeFeeder final : public BatchFeeder {
 public:
  explicit FakeFeeder(const double* share, absl::Time* now) : share_(share), now_(now) {}
  absl::StatusOr<TrainingBatch> Next() override {
    *now_ += absl::Milliseconds(20);
    TrainingBatch batch;
    batch.count = 256;
    batch.data_wait = absl::Milliseconds(6);
    batch.gpu_decode_share = *share_;
    return batch;
  }

 private:
  const double* share_;
  absl::Time* now_;
};

struct Rig {
  double share = 0;   // what the fake ring produces
  double fixed = -1;  // >= 0: the fake service ignores requests and produces this
  absl::Time now = absl::UnixEpoch();
  std::vector<double> requests;
  std::vector<std::pair<double, double>> held;  // on_hold's (share, images/s)
  DecodeShareGauge gauge;

  std::unique_ptr<BatchFeeder> Feeder(GpuDecodeSharePlan plan) {
    share = fixed >= 0 ? fixed : plan.initial;
    ShareControl control;
    control.plan = plan;
    control.request = [this](double s) {
      requests.push_back(s);
      if (fixed < 0) share = s;
    };
    control.gauge = &gauge;
    control.log_windows = true;
    control.on_hold = [this](double s, double rate) { held.emplace_back(s, rate); };
    control.clock = [this] { return now; };
    return MakeShareControlledFeeder(std::make_unique<FakeFeeder>(&share, &now),
                                     std::move(control));
  }
};

TEST(ShareControlledFeederTest, AnAdaptivePlanAsksTheRingForMoreWhileItWaitsForData) {
  Rig rig;
  auto feeder = rig.Feeder({0.0, true});
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(feeder->Next().ok());
  ASSERT_FALSE(rig.requests.empty());
  // The ladder's first rung.
  EXPECT_DOUBLE_EQ(rig.requests.front(), 0.25);
  const DecodeShareGauge::Reading reading = rig.gauge.Read();
  EXPECT_EQ(reading.mode, DecodeShareMode::kAdaptive);
  EXPECT_DOUBLE_EQ(reading.share, rig.share);
}

TEST(ShareControlledFeederTest, AnAdaptivePlanPassesTheShareItHoldsOnOnce) {
  // The fake's rate does not depend on the share: no share pays, and 0 is held.
  Rig rig;
  auto feeder = rig.Feeder({0.0, true});
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(feeder->Next().ok());
  ASSERT_EQ(rig.held.size(), 1u);
  EXPECT_DOUBLE_EQ(rig.held[0].first, 0.0);
  EXPECT_NEAR(rig.held[0].second, 256 / 0.020, 1.0);
  EXPECT_TRUE(rig.gauge.Read().settled);
}

TEST(ShareControlledFeederTest, AnAdaptivePlanWithAPriorStartsThere) {
  Rig rig;
  GpuDecodeSharePlan plan;
  plan.initial = 0.5;
  plan.adaptive = true;
  plan.prior = 0.5;
  auto feeder = rig.Feeder(plan);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(feeder->Next().ok());
    ASSERT_DOUBLE_EQ(rig.gauge.Read().share, 0.5);
  }
  EXPECT_TRUE(rig.requests.empty());
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(feeder->Next().ok());
  // Refining from the prior: its lower neighbour first (nothing known above). On this flat
  // rate every lower share is as fast, so the cheapest wins, step by step, down to 0.
  ASSERT_GE(rig.requests.size(), 4u);
  EXPECT_DOUBLE_EQ(rig.requests[0], 0.375);
  ASSERT_EQ(rig.held.size(), 1u);
  EXPECT_DOUBLE_EQ(rig.held[0].first, 0.0);
}

TEST(ShareControlledFeederTest, AFixedPlanAsksForNothingAndReportsItsShare) {
  Rig rig;
  auto feeder = rig.Feeder({0.25, false});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(feeder->Next().ok());
  EXPECT_TRUE(rig.requests.empty());
  EXPECT_EQ(rig.gauge.Read().mode, DecodeShareMode::kFixed);
  EXPECT_DOUBLE_EQ(rig.gauge.Read().share, 0.25);

  Rig off;
  auto cpu = off.Feeder({0.0, false});
  ASSERT_TRUE(cpu->Next().ok());
  EXPECT_EQ(off.gauge.Read().mode, DecodeShareMode::kOff);
}

TEST(ShareControlledFeederTest, AShareFixedByTheServiceIsReportedAsSuch) {
  Rig fixed_plan;
  fixed_plan.fixed = 0.5;
  auto feeder = fixed_plan.Feeder({0.0, false});
  ASSERT_TRUE(feeder->Next().ok());
  EXPECT_EQ(fixed_plan.gauge.Read().mode, DecodeShareMode::kService);
  EXPECT_DOUBLE_EQ(fixed_plan.gauge.Read().share, 0.5);

  Rig adaptive;
  adaptive.fixed = 0.5;
  auto adapting = adaptive.Feeder({0.0, true});
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(adapting->Next().ok());
  EXPECT_EQ(adaptive.gauge.Read().mode, DecodeShareMode::kService);
  EXPECT_TRUE(adaptive.requests.empty());
}

}  // namespace
}  // namespace stoker::trainer
