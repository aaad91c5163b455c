#include "trainer/comm/bucket_plan.h"

#include <set>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(BucketPlanTest, PacksLastRegisteredFirstWithinTheBudget) {
  // 4-byte elements, 40-byte budget: 10 elements a bucket.
  std::vector<Bucket> buckets = PlanBuckets({4, 3, 5, 2, 6}, 4, 40);
  // Reversed numels 6, 2 | 5, 3 | 4: each bucket stops before it would pass 10.
  ASSERT_EQ(buckets.size(), 3u);
  ASSERT_EQ(buckets[0].slots.size(), 2u);
  EXPECT_EQ(buckets[0].slots[0].parameter, 4);
  EXPECT_EQ(buckets[0].slots[1].parameter, 3);
  EXPECT_EQ(buckets[0].slots[1].offset, 6);
  EXPECT_EQ(buckets[0].numel, 8);
  ASSERT_EQ(buckets[1].slots.size(), 2u);
  EXPECT_EQ(buckets[1].slots[0].parameter, 2);
  EXPECT_EQ(buckets[1].slots[1].parameter, 1);
  EXPECT_EQ(buckets[1].slots[1].offset, 5);
  EXPECT_EQ(buckets[1].numel, 8);
  ASSERT_EQ(buckets[2].slots.size(), 1u);
  EXPECT_EQ(buckets[2].slots[0].parameter, 0);
}

TEST(BucketPlanTest, OversizedParameterGetsItsOwnBucket) {
  std::vector<Bucket> buckets = PlanBuckets({1, 100, 1}, 4, 40);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[1].slots.size(), 1u);
  EXPECT_EQ(buckets[1].numel, 100);
}

TEST(BucketPlanTest, EveryParameterAppearsExactlyOnce) {
  std::vector<int64_t> numels;
  for (int i = 0; i < 100; ++i) numels.push_back(1 + (i * 37) % 50);
  std::set<int> seen;
  for (const Bucket& bucket : PlanBuckets(numels, 4, 256)) {
    int64_t offset = 0;
    for (const BucketSlot& slot : bucket.slots) {
      EXPECT_TRUE(seen.insert(slot.parameter).second);
      EXPECT_EQ(slot.offset, offset);
      EXPECT_EQ(slot.numel, numels[slot.parameter]);
      offset += slot.numel;
    }
    EXPECT_EQ(offset, bucket.numel);
  }
  EXPECT_EQ(seen.size(), numels.size());
}

}  // namespace
}  // namespace stoker::trainer
