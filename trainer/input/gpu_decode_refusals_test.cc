#include "trainer/input/gpu_decode_refusals.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

// A batch of `count` samples whose dataset indices are 100 + position.
struct Batch {
  std::vector<int64_t> indices;
  data_service::BatchView view;
  explicit Batch(int count) {
    for (int i = 0; i < count; ++i) indices.push_back(100 + i);
    view.epoch = 3;
    view.step = 7;
    view.count = count;
    view.sample_indices = indices.data();
  }
};

// A bad-data policy that records what it is told, and stops the run at the `stop_at`-th
// report (from 1; 0: never), as --bad_files=fail stops it at the first.
struct Policy {
  std::vector<std::pair<int64_t, std::string>> reports;
  int stop_at = 0;
  BadSampleReport Report() {
    return [this](int64_t index, absl::string_view why) -> absl::StatusOr<std::string> {
      reports.emplace_back(index, std::string(why));
      if (static_cast<int>(reports.size()) == stop_at) {
        return absl::DataLossError(absl::StrCat("sample ", index, " (--bad_files=fail)"));
      }
      return absl::StrCat("/data/", index, ".jpg");
    };
  }
};

TEST(RouteRefusedSamplesTest, EveryRefusalIsReportedByIndexAndReplacedByTheNextDecodedSample) {
  Batch batch(6);
  Policy policy;
  const std::vector<RefusedJpeg> refused = {{1, "bad JPEG"}, {2, "bad JPEG"}, {5, "truncated"}};
  auto replacements = RouteRefusedSamples(batch.view, refused, policy.Report());
  ASSERT_OK(replacements);
  EXPECT_EQ(policy.reports, (std::vector<std::pair<int64_t, std::string>>{
                                {101, "bad JPEG"}, {102, "bad JPEG"}, {105, "truncated"}}));
  ASSERT_EQ(replacements->size(), 3u);
  EXPECT_EQ((*replacements)[0].refused, 1);
  EXPECT_EQ((*replacements)[0].with, 3);
  EXPECT_EQ((*replacements)[1].refused, 2);
  EXPECT_EQ((*replacements)[1].with, 3);
  EXPECT_EQ((*replacements)[2].refused, 5);
  EXPECT_EQ((*replacements)[2].with, 0);  // cyclically
}

TEST(RouteRefusedSamplesTest, APolicyThatStopsTheRunStopsIt) {
  Batch batch(6);
  Policy policy;
  policy.stop_at = 1;
  EXPECT_THAT(RouteRefusedSamples(batch.view, {{4, "bad JPEG"}, {5, "bad JPEG"}}, policy.Report()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sample 104 (--bad_files=fail)")));
  EXPECT_EQ(policy.reports.size(), 1u) << "nothing is reported after the policy stopped the run";
}

TEST(RouteRefusedSamplesTest, ABatchRefusedWholeIsReportedThenDataLoss) {
  Batch batch(2);
  Policy policy;
  EXPECT_THAT(RouteRefusedSamples(batch.view, {{0, "a"}, {1, "b"}}, policy.Report()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("every one of the 2 samples")));
  EXPECT_EQ(policy.reports.size(), 2u);
}

TEST(RouteRefusedSamplesTest, NothingRefusedReportsNothing) {
  Batch batch(4);
  Policy policy;
  auto replacements = RouteRefusedSamples(batch.view, {}, policy.Report());
  ASSERT_OK(replacements);
  EXPECT_TRUE(replacements->empty());
  EXPECT_TRUE(policy.reports.empty());
}

TEST(RouteRefusedSamplesTest, PositionsOutsideTheBatchOrOutOfOrderAreRefused) {
  Batch batch(4);
  Policy policy;
  EXPECT_THAT(RouteRefusedSamples(batch.view, {{4, "x"}}, policy.Report()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RouteRefusedSamples(batch.view, {{-1, "x"}}, policy.Report()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RouteRefusedSamples(batch.view, {{2, "x"}, {1, "y"}}, policy.Report()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(policy.reports.empty());
}

}  // namespace
}  // namespace stoker::trainer
