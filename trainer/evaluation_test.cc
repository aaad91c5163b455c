// Validation counts every sample once, whatever the world size, and computes top-1/top-k.
#include "trainer/evaluation.h"

#include <ATen/ATen.h>

#include <set>

#include "gtest/gtest.h"
#include "trainer/comm/fake_communicator.h"

namespace stoker::trainer {
namespace {

// DistributedSampler without shuffle: 0..n-1 padded by wrap-around, every world-th from rank.
std::vector<int64_t> RankIndices(int64_t n, int world, int rank) {
  const int64_t per_rank = (n + world - 1) / world;
  std::vector<int64_t> out;
  for (int64_t j = 0; j < per_rank; ++j) out.push_back((rank + j * world) % n);
  return out;
}

TEST(CountedInValidationTest, EverySampleCountsOnceWhenTheWorldDoesNotDivideTheSplit) {
  for (int64_t n : {100, 101, 7, 1}) {
    for (int world : {1, 2, 3, 4, 8}) {
      for (int batch : {1, 5, 32}) {
        std::multiset<int64_t> counted;
        for (int rank = 0; rank < world; ++rank) {
          const std::vector<int64_t> mine = RankIndices(n, world, rank);
          for (size_t first = 0; first < mine.size(); first += batch) {
            const size_t count = std::min<size_t>(batch, mine.size() - first);
            const absl::Span<const int64_t> indices(mine.data() + first, count);
            const std::vector<uint8_t> keep = CountedInValidation(indices, first, rank, world);
            for (size_t i = 0; i < count; ++i) {
              if (keep[i]) counted.insert(indices[i]);
            }
          }
        }
        ASSERT_EQ(counted.size(), static_cast<size_t>(n)) << n << " " << world << " " << batch;
        ASSERT_EQ(std::set<int64_t>(counted.begin(), counted.end()).size(), static_cast<size_t>(n));
      }
    }
  }
}

TEST(ValidationTallyTest, CountsTop1AndTop5OverCountedSamplesOnly) {
  ValidationTally tally(at::kCPU);
  // 7 classes. Sample 0: right at top-1. Sample 1: right at rank 3. Sample 2: right at
  // rank 6 (wrong in the top 5). Sample 3: a padding duplicate, wrong, not counted.
  at::Tensor logits = (7 - at::arange(7, at::kFloat)).repeat({4, 1});
  at::Tensor labels = at::tensor(std::vector<int64_t>{0, 2, 5, 6});
  tally.Add(logits, labels, {1, 1, 1, 0});
  std::vector<std::unique_ptr<FakeCommunicator>> one = FakeCommunicator::Group(1);
  auto result = tally.Reduce(*one[0]);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->samples, 3);
  EXPECT_DOUBLE_EQ(result->top1, 1.0 / 3);
  EXPECT_DOUBLE_EQ(result->top5, 2.0 / 3);
  const double expected_loss =
      at::cross_entropy_loss(logits.narrow(0, 0, 3), labels.narrow(0, 0, 3)).item<double>();
  EXPECT_NEAR(result->loss, expected_loss, 1e-5);
}

TEST(ValidationTallyTest, FewerThanFiveClassesUseAllOfThem) {
  ValidationTally tally(at::kCPU);
  tally.Add(at::tensor(std::vector<float>{1, 2, 0, 3}).reshape({2, 2}),
            at::tensor(std::vector<int64_t>{0, 1}), {1, 1});
  std::vector<std::unique_ptr<FakeCommunicator>> one = FakeCommunicator::Group(1);
  auto result = tally.Reduce(*one[0]);
  ASSERT_TRUE(result.ok());
  EXPECT_DOUBLE_EQ(result->top1, 0.5);
  EXPECT_DOUBLE_EQ(result->top5, 1.0);
}

}  // namespace
}  // namespace stoker::trainer
