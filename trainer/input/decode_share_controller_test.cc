// DecodeShareController on synthetic throughput curves with a fake clock: a simulated
// trainer whose batches take the time the curve says at the share they were produced with,
// arriving a few batches after each request (the ring's pipeline).
#include "trainer/input/decode_share_controller.h"

#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using Phase = DecodeShareController::Phase;

constexpr int64_t kBatch = 256;

// What the trainer sees at a share: images per second, and the share of the time it waits
// for data.
struct Point {
  double images_per_second;
  double wait_share;
};
using Curve = std::function<Point(double share)>;

// Linear interpolation through (share, images/s) points; waits for data below `wait_below`.
Curve Interpolated(std::vector<std::pair<double, double>> points, double wait_below) {
  return [points, wait_below](double share) {
    double rate = points.back().second;
    for (size_t i = 1; i < points.size(); ++i) {
      if (share <= points[i].first) {
        const double t = (share - points[i - 1].first) / (points[i].first - points[i - 1].first);
        rate = points[i - 1].second + t * (points[i].second - points[i - 1].second);
        break;
      }
    }
    return Point{rate, share < wait_below - 1e-9 ? 0.3 : 0.0};
  };
}

class Simulation {
 public:
  explicit Simulation(Curve curve, DecodeShareControllerOptions options = {}, int lag = 5,
                      std::optional<double> prior = std::nullopt)
      : curve_(std::move(curve)), controller_(options, prior), lag_(lag) {
    for (int i = 0; i < lag_; ++i) pipeline_.push_back(controller_.requested());
  }

  // Runs `batches` batches; `noise` (a fraction) perturbs each batch's time.
  void Run(int batches, double noise = 0.0) {
    for (int b = 0; b < batches; ++b) {
      const double share = pipeline_.front();
      pipeline_.pop_front();
      const Point p = curve_(share);
      // A deterministic perturbation in [-noise, noise].
      const double wobble = noise * std::sin(static_cast<double>(++count_) * 12.9898);
      const double seconds = kBatch / p.images_per_second * (1 + wobble);
      now_ += absl::Seconds(seconds);
      images_ += kBatch;
      const double want =
          controller_.Observe(share, kBatch, absl::Seconds(seconds * p.wait_share), now_);
      if (want > controller_.requested() + 1e-12 || want < controller_.requested() - 1e-12) {
        ADD_FAILURE() << "Observe returned " << want << " but requested() is "
                      << controller_.requested();
      }
      if (want > max_requested_) max_requested_ = want;
      requested_history_.push_back(want);
      held_history_.push_back(controller_.settled() ? controller_.held() : -1.0);
      pipeline_.push_back(fixed_ >= 0 ? fixed_ : want);
    }
  }

  // Runs batch by batch until the controller settles.
  void RunUntilSettled() {
    while (!controller_.settled()) Run(1);
  }

  void Pause(absl::Duration d) { now_ += d; }
  void SetCurve(Curve curve) { curve_ = std::move(curve); }
  // The data service ignores the requests and produces `share`.
  void FixAt(double share) {
    fixed_ = share;
    for (double& s : pipeline_) s = share;
  }

  DecodeShareController& controller() { return controller_; }
  double max_requested() const { return max_requested_; }
  const std::vector<double>& history() const { return requested_history_; }
  // The share held after each batch (-1 while not settled).
  const std::vector<double>& held_history() const { return held_history_; }
  absl::Duration elapsed() const { return now_ - absl::UnixEpoch(); }
  absl::Time now() const { return now_; }
  int64_t images() const { return images_; }

 private:
  Curve curve_;
  DecodeShareController controller_;
  int lag_;
  std::deque<double> pipeline_;
  absl::Time now_ = absl::UnixEpoch();
  int64_t count_ = 0;
  double fixed_ = -1;
  double max_requested_ = 0;
  std::vector<double> requested_history_;
  std::vector<double> held_history_;
  int64_t images_ = 0;
};

// The measured H200 figures for ResNet-18 from JPEG (share: images/s), filled in between:
// best at 0.25; above it the GPU's decode slows the feed, so the trainer still waits for
// data (below `wait_below`) while the throughput falls.
Curve ResNet18Like(double wait_below = 0.6) {
  return Interpolated({{0, 13700},
                       {0.125, 15400},
                       {0.25, 16700},
                       {0.375, 16100},
                       {0.5, 15200},
                       {0.75, 13300},
                       {1, 12000}},
                      wait_below);
}

// The measured H200 figures for a rank that only takes batches (--data_only) from JPEG,
// filled in between: best at 0.75 (33,488 images/s against 14,281 at 0). Always waiting for
// input: there is no step.
Curve DataOnlyLike() {
  return Interpolated({{0, 14281}, {0.25, 22000}, {0.5, 29000}, {0.75, 33488}, {1, 31000}},
                      /*wait_below=*/2.0);
}

// The controller of `sim` holds `share` (it may be trying a neighbour of it right now).
void ExpectSettledAt(Simulation& sim, double share) {
  EXPECT_TRUE(sim.controller().settled()) << DecodeSharePhaseName(sim.controller().phase());
  EXPECT_DOUBLE_EQ(sim.controller().held(), share);
}

// Of the batches in [from, history end), the fraction requested at another share than
// the one held.
double ShareAwayFromHeld(const Simulation& sim, size_t from) {
  int away = 0;
  for (size_t i = from; i < sim.history().size(); ++i) {
    if (sim.history()[i] != sim.held_history()[i]) ++away;
  }
  return static_cast<double>(away) / static_cast<double>(sim.history().size() - from);
}

TEST(DecodeShareControllerTest, DefaultOptionsAreValid) {
  EXPECT_TRUE(DecodeShareControllerOptions{}.Validate().ok());
  DecodeShareControllerOptions bad;
  bad.step = 0;
  EXPECT_FALSE(bad.Validate().ok());
  bad = {};
  bad.reprobe_drop = 1.5;
  EXPECT_FALSE(bad.Validate().ok());
  bad = {};
  bad.ladder_step = 0.3;  // not a multiple of step
  EXPECT_FALSE(bad.Validate().ok());
  bad = {};
  bad.max_recheck_interval = absl::Seconds(1);
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(DecodeShareControllerTest, ClimbsTheLadderRefinesAndSettlesAtThePeak) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ExpectSettledAt(sim, 0.25);
  // The ladder went one rung past the peak (0.5 did not pay) and stopped there.
  EXPECT_DOUBLE_EQ(sim.max_requested(), 0.5);
  EXPECT_DOUBLE_EQ(sim.controller().delivered(), sim.controller().requested());
}

TEST(DecodeShareControllerTest, SettlesWithinAFewShortWindows) {
  // ResNet-18 takes ~65 batches/s: the ladder (0, 0.25, 0.5), the refinement (0.375,
  // 0.125) and the first hold window take a few seconds, not minutes.
  for (const auto& [name, curve, held, max_windows] :
       {std::tuple<const char*, Curve, double, int64_t>{"training", ResNet18Like(), 0.25, 6},
        {"data-only", DataOnlyLike(), 0.75, 7}}) {
    SCOPED_TRACE(name);
    Simulation sim(curve);
    sim.RunUntilSettled();
    std::printf("%s curve: settled at %.3f after %.1f s, %lld windows\n", name,
                sim.controller().held(), absl::ToDoubleSeconds(sim.elapsed()),
                static_cast<long long>(sim.controller().windows()));
    EXPECT_DOUBLE_EQ(sim.controller().held(), held);
    EXPECT_LE(sim.controller().windows(), max_windows);
    EXPECT_LT(sim.elapsed(), absl::Seconds(5));
    ASSERT_TRUE(sim.controller().first_settled().has_value());
    EXPECT_LE(*sim.controller().first_settled() - sim.controller().first_batch(), sim.elapsed());
  }
}

TEST(DecodeShareControllerTest, WholeRunThroughputIsWithinFivePercentOfTheBestFixedShare) {
  // 30 simulated seconds from the first batch, ladder, refinement and rechecks included.
  for (const auto& [name, curve, best] :
       {std::tuple<const char*, Curve, double>{"training", ResNet18Like(), 16700},
        std::tuple<const char*, Curve, double>{"data only", DataOnlyLike(), 33488}}) {
    Simulation sim(curve);
    while (sim.elapsed() < absl::Seconds(30)) sim.Run(1);
    const double whole = static_cast<double>(sim.images()) / absl::ToDoubleSeconds(sim.elapsed());
    std::printf("%s: %.0f images/s over the whole run, the best fixed share %.0f\n", name, whole,
                best);
    EXPECT_GE(whole, 0.95 * best) << name;
  }
}

TEST(DecodeShareControllerTest, StopsClimbingOnceTheTrainerNoLongerWaitsForData) {
  Simulation sim(ResNet18Like(/*wait_below=*/0.25));
  sim.Run(2000);
  ExpectSettledAt(sim, 0.25);
  EXPECT_DOUBLE_EQ(sim.max_requested(), 0.25);
}

TEST(DecodeShareControllerTest, SettlesDespiteNoise) {
  Simulation sim(ResNet18Like());
  sim.Run(4000, /*noise=*/0.01);
  ExpectSettledAt(sim, 0.25);
  // Settled means settled: the held share does not change over the last half, and the
  // rechecks keep the share elsewhere for a small part of it.
  const size_t half = sim.history().size() / 2;
  for (size_t i = half; i < sim.history().size(); ++i) {
    ASSERT_DOUBLE_EQ(sim.held_history()[i], 0.25) << "batch " << i;
  }
  EXPECT_LT(ShareAwayFromHeld(sim, half), 0.05);
}

TEST(DecodeShareControllerTest, LandsWithinFivePercentOfThePeakUnderHeavyNoise) {
  // Each batch's time wobbles by up to 5%: a window may misjudge a neighbour, but what it
  // holds is close to the best.
  for (const auto& [curve, best] :
       {std::pair<Curve, double>{ResNet18Like(), 16700}, {DataOnlyLike(), 33488}}) {
    Simulation sim(curve);
    sim.Run(3000, /*noise=*/0.05);
    ASSERT_TRUE(sim.controller().settled());
    EXPECT_GE(curve(sim.controller().held()).images_per_second, 0.95 * best)
        << "held " << sim.controller().held();
  }
}

TEST(DecodeShareControllerTest, NeverRaisesTheShareWhileTheTrainerDoesNotWaitForData) {
  // Faster at every higher share, but the trainer never waits for data: the GPU is the
  // bottleneck and more work on it cannot help (a curve that says otherwise is noise).
  Simulation sim(Interpolated({{0, 10000}, {1, 20000}}, /*wait_below=*/0.0));
  sim.Run(2000);
  EXPECT_EQ(sim.max_requested(), 0.0);
  ExpectSettledAt(sim, 0.0);
}

TEST(DecodeShareControllerTest, ClimbsAllTheWayWhenEveryStepPays) {
  // Always waiting for data, faster with every share.
  Simulation sim(Interpolated({{0, 10000}, {1, 43000}}, /*wait_below=*/2.0));
  sim.Run(3000);
  ExpectSettledAt(sim, 1.0);
}

TEST(DecodeShareControllerTest, AStepThatDoesNotPayIsTakenBack) {
  // Waiting for data, but the GPU's decode costs as much as it saves: flat. The first
  // rung does not pay, so the ladder stops there and the refinement's 0.125 does not
  // pay either: back to 0, and every recheck returns there.
  Simulation sim(Interpolated({{0, 10000}, {1, 10000}}, /*wait_below=*/2.0));
  sim.Run(2000);
  ExpectSettledAt(sim, 0.0);
  EXPECT_DOUBLE_EQ(sim.max_requested(), 0.25);
  EXPECT_LT(ShareAwayFromHeld(sim, sim.history().size() / 2), 0.05);
}

TEST(DecodeShareControllerTest, RechecksBackOffWhileNoNeighbourPays) {
  Simulation sim(ResNet18Like());
  sim.RunUntilSettled();
  // Over ten simulated minutes the recheck interval doubles to its bound.
  const absl::Time start = sim.now();
  std::vector<absl::Time> rechecks;
  while (sim.now() - start < absl::Minutes(10)) {
    const bool before = sim.controller().phase() == Phase::kRechecking;
    sim.Run(1);
    if (!before && sim.controller().phase() == Phase::kRechecking) rechecks.push_back(sim.now());
  }
  ExpectSettledAt(sim, 0.25);
  ASSERT_GE(rechecks.size(), 4u);
  EXPECT_LE(rechecks.size(), 8u);
  for (size_t i = 2; i < rechecks.size(); ++i) {
    EXPECT_GT(rechecks[i] - rechecks[i - 1],
              1.5 * (rechecks[i - 1] - rechecks[i - 2]) - absl::Seconds(2))
        << "recheck " << i;
  }
  EXPECT_EQ(sim.controller().recheck_interval(),
            DecodeShareControllerOptions{}.max_recheck_interval);
}

TEST(DecodeShareControllerTest, ARecheckThatPaysMovesTheHeldShare) {
  // A curve that changes mid-run without a fall: the held share keeps its rate, but a
  // higher share became faster (the data service lost CPU to another job, say). A
  // periodic recheck finds it.
  Simulation sim(DataOnlyLike());
  sim.Run(2000);
  ASSERT_DOUBLE_EQ(sim.controller().held(), 0.75);
  sim.SetCurve(Interpolated({{0, 8000}, {0.75, 33488}, {1, 40000}}, /*wait_below=*/2.0));
  // The rechecks alternate down and up, at intervals that have grown while nothing paid:
  // a few minutes at most.
  sim.Run(40000);
  ExpectSettledAt(sim, 1.0);
}

TEST(DecodeShareControllerTest, ProbesAgainWhenThroughputFallsClearly) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ASSERT_DOUBLE_EQ(sim.controller().held(), 0.25);
  // 5% slower everywhere: within the band, the held share does not move.
  sim.SetCurve([](double s) {
    Point p = ResNet18Like()(s);
    p.images_per_second *= 0.95;
    return p;
  });
  const size_t before = sim.history().size();
  sim.Run(1000);
  for (size_t i = before; i < sim.history().size(); ++i) {
    ASSERT_DOUBLE_EQ(sim.held_history()[i], 0.25) << "batch " << i;
  }
  // The data gets slower (say, larger images): now the best share is 0.5, and the trainer
  // waits for data at 0.25. A clear fall starts a refinement that climbs to the new peak.
  sim.SetCurve(Interpolated({{0, 8000}, {0.25, 11000}, {0.5, 14000}, {0.625, 13500}, {1, 11000}},
                            /*wait_below=*/0.5));
  sim.Run(3000);
  ExpectSettledAt(sim, 0.5);
}

TEST(DecodeShareControllerTest, OneSlowWindowIsNotAFall) {
  // Where the data service is the bottleneck one window's rate varies by 10-15%: a single
  // window 25% slow leaves the held share and its rate (the mean of the held windows) alone.
  Simulation sim(DataOnlyLike());
  sim.Run(2000);
  ASSERT_DOUBLE_EQ(sim.controller().held(), 0.75);
  EXPECT_NEAR(sim.controller().held_rate(), 33488, 33488 * 0.01);
  auto next_window = [&sim] {
    const int64_t windows = sim.controller().windows();
    while (sim.controller().windows() == windows) sim.Run(1);
  };
  while (sim.controller().phase() != Phase::kSettled) sim.Run(1);
  next_window();
  sim.SetCurve([](double s) {
    Point p = DataOnlyLike()(s);
    p.images_per_second *= 0.75;
    return p;
  });
  next_window();
  EXPECT_NE(sim.controller().last_decision().find("window 1 of 2 to refine"), std::string::npos)
      << sim.controller().last_decision();
  sim.SetCurve(DataOnlyLike());
  const size_t before = sim.history().size();
  sim.Run(2000);
  for (size_t i = before; i < sim.history().size(); ++i) {
    ASSERT_DOUBLE_EQ(sim.held_history()[i], 0.75) << "batch " << i;
  }
  EXPECT_NEAR(sim.controller().held_rate(), 33488, 33488 * 0.02);
}

TEST(DecodeShareControllerTest, AProbeAfterAFallCanGoDown) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ASSERT_DOUBLE_EQ(sim.controller().held(), 0.25);
  // The GPU gets busier (another job on it): GPU decode now hurts, and the trainer does
  // not wait for data at 0.25.
  sim.SetCurve(Interpolated({{0, 12000}, {0.125, 11000}, {0.25, 10000}, {1, 6000}},
                            /*wait_below=*/0.0));
  sim.Run(3000);
  ExpectSettledAt(sim, 0.0);
}

TEST(DecodeShareControllerTest, APauseBetweenBatchesIsNotAFall) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ASSERT_TRUE(sim.controller().settled());
  for (int i = 0; i < 5; ++i) {
    sim.Pause(absl::Seconds(30));  // validation
    sim.Run(40);
  }
  ExpectSettledAt(sim, 0.25);
}

TEST(DecodeShareControllerTest, BatchesOfTheOldShareAreNotCounted) {
  // A long pipeline: the controller must not judge 0.25 by batches still made at 0.
  Simulation sim(ResNet18Like(), DecodeShareControllerOptions{}, /*lag=*/40);
  sim.Run(4000);
  ExpectSettledAt(sim, 0.25);
}

TEST(DecodeShareControllerTest, StartsFromThePriorAndSkipsTheLadder) {
  Simulation sim(DataOnlyLike(), DecodeShareControllerOptions{}, /*lag=*/5, /*prior=*/0.75);
  EXPECT_DOUBLE_EQ(sim.controller().requested(), 0.75);
  EXPECT_EQ(sim.controller().phase(), Phase::kRefining);
  sim.RunUntilSettled();
  EXPECT_DOUBLE_EQ(sim.controller().held(), 0.75);
  // The prior and its two neighbours: three windows; the ladder's 0 never requested.
  EXPECT_LE(sim.controller().windows(), 3);
  for (double share : sim.history()) ASSERT_GE(share, 0.625);
}

TEST(DecodeShareControllerTest, AWrongPriorStillReachesThePeak) {
  Simulation sim(ResNet18Like(), DecodeShareControllerOptions{}, /*lag=*/5, /*prior=*/1.0);
  sim.Run(3000);
  ExpectSettledAt(sim, 0.25);
}

TEST(DecodeShareControllerTest, StopsAdaptingWhenTheServiceFixesTheShare) {
  Simulation sim(ResNet18Like());
  sim.FixAt(0.5);
  sim.Run(500);
  EXPECT_EQ(sim.controller().phase(), Phase::kFixedByService);
  EXPECT_DOUBLE_EQ(sim.controller().delivered(), 0.5);
  EXPECT_STREQ(DecodeSharePhaseName(sim.controller().phase()), "fixed by the data service");
}

TEST(DecodeShareControllerTest, WindowsLastAtLeastTheMinimumTime) {
  DecodeShareControllerOptions options;
  options.min_window = absl::Seconds(1000);  // far longer than the run
  Simulation sim(ResNet18Like(), options);
  sim.Run(2000);
  EXPECT_EQ(sim.controller().phase(), Phase::kLadder);
  EXPECT_EQ(sim.max_requested(), 0.0);
  EXPECT_EQ(sim.controller().windows(), 0);
}

}  // namespace
}  // namespace stoker::trainer
