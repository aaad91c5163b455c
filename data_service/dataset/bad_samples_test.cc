// Tests of the bad-sample policy: flag parsing and validation, each bad sample counted
// once however often it is marked, and the skipped-fraction limit.
#include "data_service/dataset/bad_samples.h"

#include <memory>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(BadSamplesTest, ParsesThePolicyAndNamesTheFlag) {
  EXPECT_EQ(*ParseBadFilePolicy("skip"), BadFilePolicy::kSkip);
  EXPECT_EQ(*ParseBadFilePolicy("fail"), BadFilePolicy::kFail);
  auto bad = ParseBadFilePolicy("ignore");
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--bad_files")));
  EXPECT_EQ(BadFilePolicyName(BadFilePolicy::kFail), "fail");
  BadSampleOptions options;
  EXPECT_OK(options.Validate());
  options.max_fraction = 1.5;
  EXPECT_NE(options.Validate().message().find("--max_bad_fraction"), std::string::npos);
  options.max_fraction = -0.1;
  EXPECT_FALSE(options.Validate().ok());
}

TEST(BadSamplesTest, EachSampleIsCountedOnceHoweverOftenItIsMarked) {
  auto counters = std::make_shared<BadSampleCounters>();
  BadSampleTracker train({}, 200, counters);
  BadSampleTracker val({}, 10, counters);
  EXPECT_FALSE(train.IsKnownBad(130));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        train.MarkBad(130, "sample 130 (x.jpg)", absl::InvalidArgumentError("corrupt"));
        train.MarkBad(3, "sample 3 (y.jpg)", absl::InvalidArgumentError("corrupt"));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  val.MarkBad(3, "sample 3 (val/y.jpg)", absl::InvalidArgumentError("corrupt"));
  EXPECT_TRUE(train.IsKnownBad(130));
  EXPECT_TRUE(train.IsKnownBad(3));
  EXPECT_FALSE(train.IsKnownBad(4));
  EXPECT_FALSE(train.IsKnownBad(-1));
  EXPECT_FALSE(train.IsKnownBad(200));
  EXPECT_EQ(counters->stats().bad_files, 3);  // two of training, one of validation
}

TEST(BadSamplesTest, FailsOnceTheSkippedFractionPassesTheLimit) {
  BadSampleOptions options;
  options.max_fraction = 0.1;
  options.min_samples = 50;
  BadSampleTracker tracker(options, 1000, nullptr);
  // Within the first min_samples, up to max_fraction * min_samples = 5 skips are fine.
  tracker.AddSeen(10);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(tracker.CountSkip("s", absl::DataLossError("x")).ok());
  absl::Status sixth = tracker.CountSkip("sample 9 (z.jpg)", absl::DataLossError("truncated"));
  EXPECT_THAT(sixth, StatusIs(absl::StatusCode::kDataLoss,
                              AllOf(HasSubstr("--max_bad_fraction"), HasSubstr("z.jpg"))));
  // Later the fraction of the samples seen counts.
  tracker.AddSeen(990);  // 1000 seen: 100 skips allowed
  for (int i = 0; i < 93; ++i) EXPECT_TRUE(tracker.CountSkip("s", absl::DataLossError("x")).ok());
  EXPECT_OK(tracker.CountSkip("s", absl::DataLossError("x")));  // the 100th
  EXPECT_FALSE(tracker.CountSkip("s", absl::DataLossError("x")).ok());
  EXPECT_EQ(tracker.stats().samples_seen, 1000);
  EXPECT_EQ(tracker.stats().samples_skipped, 101);
}

TEST(BadSamplesTest, AZeroFractionFailsOnTheFirstSkip) {
  BadSampleOptions options;
  options.max_fraction = 0.0;
  BadSampleTracker tracker(options, 10, nullptr);
  tracker.AddSeen(10);
  EXPECT_FALSE(tracker.CountSkip("s", absl::DataLossError("x")).ok());
}

}  // namespace
}  // namespace stoker::data_service
