// DecodeShareController on synthetic throughput curves with a fake clock: a simulated
// trainer whose batches take the time the curve says at the share they were produced with,
// arriving a few batches after each request (the ring's pipeline).
#include "trainer/input/decode_share_controller.h"

#include <cmath>
#include <deque>
#include <functional>
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
  explicit Simulation(Curve curve, DecodeShareControllerOptions options = {}, int lag = 5)
      : curve_(std::move(curve)), controller_(options), lag_(lag) {
    for (int i = 0; i < lag_; ++i) pipeline_.push_back(0.0);
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
      const double want =
          controller_.Observe(share, kBatch, absl::Seconds(seconds * p.wait_share), now_);
      if (want > controller_.requested() + 1e-12 || want < controller_.requested() - 1e-12) {
        ADD_FAILURE() << "Observe returned " << want << " but requested() is "
                      << controller_.requested();
      }
      if (want > max_requested_) max_requested_ = want;
      requested_history_.push_back(want);
      pipeline_.push_back(fixed_ >= 0 ? fixed_ : want);
    }
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

// The controller of `sim` has settled and requests `share`.
void ExpectSettledAt(Simulation& sim, double share) {
  EXPECT_EQ(sim.controller().phase(), Phase::kSettled);
  EXPECT_DOUBLE_EQ(sim.controller().requested(), share);
}

TEST(DecodeShareControllerTest, DefaultOptionsAreValid) {
  EXPECT_TRUE(DecodeShareControllerOptions{}.Validate().ok());
  DecodeShareControllerOptions bad;
  bad.step = 0;
  EXPECT_FALSE(bad.Validate().ok());
  bad = {};
  bad.reprobe_drop = 1.5;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(DecodeShareControllerTest, ClimbsToThePeakBacksOffAndSettles) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ExpectSettledAt(sim, 0.25);
  // It looked one step past the peak and came back.
  EXPECT_DOUBLE_EQ(sim.max_requested(), 0.375);
  EXPECT_DOUBLE_EQ(sim.controller().delivered(), 0.25);
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
  // Settled means settled: no change over the last half.
  for (size_t i = sim.history().size() / 2; i < sim.history().size(); ++i) {
    ASSERT_DOUBLE_EQ(sim.history()[i], 0.25) << "batch " << i;
  }
}

TEST(DecodeShareControllerTest, NeverRaisesTheShareWhileTheTrainerDoesNotWaitForData) {
  // Faster at every higher share, but the trainer never waits for data: the GPU is the
  // bottleneck and more work on it cannot help (a curve that says otherwise is noise).
  Simulation sim(Interpolated({{0, 10000}, {1, 20000}}, /*wait_below=*/0.0));
  sim.Run(2000);
  EXPECT_EQ(sim.max_requested(), 0.0);
  EXPECT_EQ(sim.controller().phase(), Phase::kSettled);
}

TEST(DecodeShareControllerTest, ClimbsAllTheWayWhenEveryStepPays) {
  // The data-only case: always waiting for data, faster with every share.
  Simulation sim(Interpolated({{0, 10000}, {1, 43000}}, /*wait_below=*/2.0));
  sim.Run(3000);
  EXPECT_DOUBLE_EQ(sim.controller().requested(), 1.0);
  EXPECT_EQ(sim.controller().phase(), Phase::kSettled);
}

TEST(DecodeShareControllerTest, AStepThatDoesNotPayIsTakenBack) {
  // Waiting for data, but the GPU's decode costs as much as it saves: flat.
  Simulation sim(Interpolated({{0, 10000}, {1, 10000}}, /*wait_below=*/2.0));
  sim.Run(2000);
  EXPECT_DOUBLE_EQ(sim.controller().requested(), 0.0);
  EXPECT_DOUBLE_EQ(sim.max_requested(), 0.125);
  EXPECT_EQ(sim.controller().phase(), Phase::kSettled);
}

TEST(DecodeShareControllerTest, ProbesAgainOnlyWhenThroughputFallsClearly) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ASSERT_DOUBLE_EQ(sim.controller().requested(), 0.25);
  // 5% slower everywhere: within the band, nothing moves.
  sim.SetCurve([](double s) {
    Point p = ResNet18Like()(s);
    p.images_per_second *= 0.95;
    return p;
  });
  const size_t before = sim.history().size();
  sim.Run(1000);
  for (size_t i = before; i < sim.history().size(); ++i) ASSERT_DOUBLE_EQ(sim.history()[i], 0.25);
  // The data gets slower (say, larger images): now the best share is 0.5, and the trainer
  // waits for data at 0.25. A clear fall starts a probe that climbs to the new peak.
  sim.SetCurve(Interpolated({{0, 8000}, {0.25, 11000}, {0.5, 14000}, {0.625, 13500}, {1, 11000}},
                            /*wait_below=*/0.5));
  sim.Run(3000);
  ExpectSettledAt(sim, 0.5);
}

TEST(DecodeShareControllerTest, AProbeAfterAFallCanGoDown) {
  Simulation sim(ResNet18Like());
  sim.Run(2000);
  ASSERT_DOUBLE_EQ(sim.controller().requested(), 0.25);
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
  ASSERT_EQ(sim.controller().phase(), Phase::kSettled);
  for (int i = 0; i < 5; ++i) {
    sim.Pause(absl::Seconds(30));  // validation
    sim.Run(40);
  }
  ExpectSettledAt(sim, 0.25);
}

TEST(DecodeShareControllerTest, BatchesOfTheOldShareAreNotCounted) {
  // A long pipeline: the controller must not judge 0.125 by batches still made at 0.
  Simulation sim(ResNet18Like(), DecodeShareControllerOptions{}, /*lag=*/40);
  sim.Run(4000);
  EXPECT_DOUBLE_EQ(sim.controller().requested(), 0.25);
  EXPECT_EQ(sim.controller().phase(), Phase::kSettled);
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
  EXPECT_EQ(sim.controller().phase(), Phase::kMeasuringBase);
  EXPECT_EQ(sim.max_requested(), 0.0);
}

}  // namespace
}  // namespace stoker::trainer
