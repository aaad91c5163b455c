// ForwardingDataset forwards every member to its base, and a subclass changes only the
// member it overrides.
#include "data_service/dataset/testing/forwarding_dataset.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/testing/status_matchers.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "gtest/gtest.h"

namespace stoker::data_service::test_util {
namespace {

using ::stoker::testing::StatusIs;

std::shared_ptr<const Dataset> Synthetic() {
  return std::shared_ptr<const Dataset>(std::move(*SyntheticDataset::Create({12, 5, 3, false})));
}

TEST(ForwardingDatasetTest, ForwardsEveryMemberToTheBase) {
  const std::shared_ptr<const Dataset> base = Synthetic();
  const ForwardingDataset forwarding(base);
  EXPECT_EQ(forwarding.size(), base->size());
  EXPECT_EQ(forwarding.num_classes(), base->num_classes());
  EXPECT_EQ(forwarding.Label(7), base->Label(7));
  EXPECT_EQ(forwarding.Describe(7), base->Describe(7));

  SampleOptions options;
  options.image_size = 8;
  SampleScratch scratch;
  std::vector<uint8_t> got(8 * 8 * 3), want(8 * 8 * 3);
  ASSERT_OK(forwarding.Load(7, options, scratch, got.data()));
  ASSERT_OK(base->Load(7, options, scratch, want.data()));
  EXPECT_EQ(got, want);
  // The synthetic dataset has no encoded form: the base's answer comes through.
  EXPECT_THAT(forwarding.ReadEncoded(7, scratch), StatusIs(absl::StatusCode::kUnimplemented));
}

// Claims one class fewer; everything else is the base's.
class FewerClasses final : public ForwardingDataset {
 public:
  using ForwardingDataset::ForwardingDataset;
  int32_t num_classes() const override { return base().num_classes() - 1; }
};

TEST(ForwardingDatasetTest, ASubclassChangesOnlyWhatItOverrides) {
  const FewerClasses dataset(Synthetic());
  EXPECT_EQ(dataset.num_classes(), 4);
  EXPECT_EQ(dataset.size(), 12);
  EXPECT_EQ(dataset.Label(6), 1);
}

}  // namespace
}  // namespace stoker::data_service::test_util
