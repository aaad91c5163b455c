// Tests of SyntheticDataset: labels, determinism, per-sample variation, and that its
// classes are separable (a nearest-mean classifier on the pixels gets them right), which
// is what makes it learnable by a small CNN.
#include "data_service/dataset/synthetic_dataset.h"

#include <array>
#include <cmath>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;

constexpr int kSize = 16;

std::vector<uint8_t> Image(const SyntheticDataset& dataset, int64_t index, uint64_t seed = 0,
                           int64_t epoch = 0, int size = kSize) {
  std::vector<uint8_t> image(size * size * 3, 0);
  SampleOptions options{size, true, seed, epoch};
  SampleScratch scratch;
  EXPECT_OK(dataset.Load(index, options, scratch, image.data()));
  return image;
}

std::unique_ptr<SyntheticDataset> Make(int64_t samples, int32_t classes, uint64_t seed = 3,
                                       bool validation = false) {
  auto dataset = SyntheticDataset::Create({samples, classes, seed, validation});
  EXPECT_OK(dataset);
  return std::move(*dataset);
}

TEST(SyntheticDatasetTest, LabelsCycleThroughTheClasses) {
  auto dataset = Make(25, 4);
  EXPECT_EQ(dataset->size(), 25);
  EXPECT_EQ(dataset->num_classes(), 4);
  for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(dataset->Label(i), i % 4);
}

TEST(SyntheticDatasetTest, TheSameIndexAlwaysGivesTheSameBytes) {
  auto a = Make(100, 10);
  auto b = Make(100, 10);
  EXPECT_EQ(Image(*a, 17), Image(*b, 17));
  // Neither the epoch nor the sampler seed changes a synthetic image.
  EXPECT_EQ(Image(*a, 17), Image(*a, 17, /*seed=*/99, /*epoch=*/5));
  // Another data seed does.
  auto c = Make(100, 10, /*seed=*/4);
  EXPECT_NE(Image(*a, 17), Image(*c, 17));
}

TEST(SyntheticDatasetTest, SamplesOfOneClassDiffer) {
  auto dataset = Make(100, 10);
  EXPECT_NE(Image(*dataset, 3), Image(*dataset, 13));
}

TEST(SyntheticDatasetTest, ValidationSplitHasOtherSamplesOfTheSameClasses) {
  auto train = Make(100, 10);
  auto val = Make(100, 10, 3, /*validation=*/true);
  EXPECT_EQ(val->Label(7), train->Label(7));
  EXPECT_NE(Image(*train, 7), Image(*val, 7));
}

TEST(SyntheticDatasetTest, WorksAtManyImageSizes) {
  auto dataset = Make(10, 10);
  for (int size : {1, 2, 7, 32, 224}) {
    std::vector<uint8_t> image = Image(*dataset, 5, 0, 0, size);
    EXPECT_EQ(image.size(), static_cast<size_t>(size * size * 3));
  }
}

// Nearest class mean over raw pixels, trained on 30 samples per class, tested on others.
TEST(SyntheticDatasetTest, ClassesAreSeparableByANearestMeanClassifier) {
  const int classes = 10;
  auto dataset = Make(1000, classes);
  std::vector<std::vector<double>> mean(classes, std::vector<double>(kSize * kSize * 3, 0.0));
  for (int64_t i = 0; i < 300; ++i) {
    std::vector<uint8_t> image = Image(*dataset, i);
    for (size_t p = 0; p < image.size(); ++p) mean[dataset->Label(i)][p] += image[p] / 30.0;
  }
  int correct = 0, total = 0;
  for (int64_t i = 500; i < 700; ++i) {
    std::vector<uint8_t> image = Image(*dataset, i);
    int best = -1;
    double best_distance = 1e300;
    for (int k = 0; k < classes; ++k) {
      double distance = 0;
      for (size_t p = 0; p < image.size(); ++p) distance += std::pow(image[p] - mean[k][p], 2);
      if (distance < best_distance) best_distance = distance, best = k;
    }
    correct += best == dataset->Label(i);
    ++total;
  }
  EXPECT_GE(correct, total * 9 / 10) << correct << " of " << total;
}

TEST(SyntheticDatasetTest, RejectsBadOptionsAndIndices) {
  EXPECT_THAT(SyntheticDataset::Create({0, 10, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SyntheticDataset::Create({10, 0, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  auto dataset = Make(10, 2);
  std::vector<uint8_t> image(kSize * kSize * 3);
  SampleScratch scratch;
  EXPECT_THAT(dataset->Load(10, {kSize, true, 0, 0}, scratch, image.data()),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(dataset->Load(-1, {kSize, true, 0, 0}, scratch, image.data()),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(dataset->Load(0, {0, true, 0, 0}, scratch, image.data()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stoker::data_service
