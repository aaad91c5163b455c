#include "trainer/input/decode_arena.h"

#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;

TEST(PlanDecodeRoundsTest, ABatchThatFitsIsOneRound) {
  const std::vector<uint64_t> sizes = {10, 20, 30};
  auto rounds = PlanDecodeRounds(sizes, 60);
  ASSERT_OK(rounds);
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].first, 0u);
  EXPECT_EQ((*rounds)[0].count, 3u);
  EXPECT_EQ((*rounds)[0].bytes, 60u);
}

TEST(PlanDecodeRoundsTest, ALargerBatchIsDecodedInRoundsEachWithinTheArena) {
  const std::vector<uint64_t> sizes = {40, 30, 30, 50, 10, 60};
  auto rounds = PlanDecodeRounds(sizes, 70);
  ASSERT_OK(rounds);
  ASSERT_EQ(rounds->size(), 4u);
  size_t next = 0;
  for (const DecodeRound& round : *rounds) {
    EXPECT_EQ(round.first, next);
    EXPECT_LE(round.bytes, 70u);
    uint64_t sum = 0;
    for (size_t i = round.first; i < round.first + round.count; ++i) sum += sizes[i];
    EXPECT_EQ(sum, round.bytes);
    next += round.count;
  }
  EXPECT_EQ(next, sizes.size());
  EXPECT_EQ((*rounds)[0].count, 2u);  // 40 + 30
  EXPECT_EQ((*rounds)[1].count, 1u);  // 30 (+ 50 is over)
  EXPECT_EQ((*rounds)[2].count, 2u);  // 50 + 10
  EXPECT_EQ((*rounds)[3].count, 1u);  // 60
}

TEST(PlanDecodeRoundsTest, AnImageLargerThanTheArenaIsRefused) {
  const std::vector<uint64_t> sizes = {10, 71};
  EXPECT_THAT(PlanDecodeRounds(sizes, 70), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PlanDecodeRoundsTest, NoImagesNoRounds) {
  auto rounds = PlanDecodeRounds({}, 70);
  ASSERT_OK(rounds);
  EXPECT_TRUE(rounds->empty());
}

}  // namespace
}  // namespace stoker::trainer
