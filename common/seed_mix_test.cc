// SplitMix64 against the reference implementation's outputs, and the identities the
// callers rely on.
#include "common/seed_mix.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(SeedMixTest, GeneratorMatchesTheReferenceSplitMix64) {
  // splitmix64.c (Vigna) seeded with 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454fULL);
}

TEST(SeedMixTest, MixIsOneStepOfTheGenerator) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{42}, ~uint64_t{0}}) {
    SplitMix64 rng(seed);
    EXPECT_EQ(SplitMix64Mix(seed), rng.Next()) << seed;
    EXPECT_EQ(SplitMix64Finalize(seed + 2 * kSplitMix64Gamma), rng.Next()) << seed;
  }
}

TEST(SeedMixTest, FinalizerIsUsableInConstantExpressions) {
  static_assert(SplitMix64Finalize(0) == 0);
  static_assert(SplitMix64Mix(0) == 0xe220a8397b1dcdafULL);
}

}  // namespace
}  // namespace stoker
