// Tests of DistributedSampler: coverage per epoch across ranks, padding, drop_last, a new
// order each epoch, the rest of an epoch on another world size, and identical indices to PyTorch's
// own DistributedSampler (run through $STOKER_PYTHON, falling back to python3; the test fails if
// torch is missing).
#include "data_service/dataset/sampler.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/python_runner.h"
#include "common/testing/status_matchers.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<std::vector<int64_t>> AllRanks(int64_t n, int world, bool drop_last, uint64_t seed,
                                           int64_t epoch) {
  std::vector<std::vector<int64_t>> result;
  for (int r = 0; r < world; ++r) {
    auto sampler = DistributedSampler::Create({n, world, r, /*shuffle=*/true, drop_last});
    EXPECT_OK(sampler);
    result.push_back(sampler->EpochIndices(seed, epoch));
  }
  return result;
}

// The indices of every rank of `ranks`, together; each rank must hold `per_rank` of them.
std::multiset<int64_t> Together(const std::vector<std::vector<int64_t>>& ranks, size_t per_rank) {
  std::multiset<int64_t> all;
  for (const std::vector<int64_t>& r : ranks) {
    EXPECT_EQ(r.size(), per_rank);
    all.insert(r.begin(), r.end());
  }
  return all;
}

TEST(TorchRandpermTest, IsAPermutation) {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    std::vector<int64_t> p = TorchRandperm(n, 1234);
    ASSERT_EQ(static_cast<int64_t>(p.size()), n);
    std::set<int64_t> seen(p.begin(), p.end());
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    if (n > 0) {
      EXPECT_EQ(*seen.rbegin(), n - 1);
    }
  }
}

TEST(DistributedSamplerTest, EveryIndexOncePerEpochAcrossRanksWhenWorldDividesN) {
  const std::multiset<int64_t> all = Together(AllRanks(120, 4, false, 7, 3), 30);
  for (int64_t i = 0; i < 120; ++i) EXPECT_EQ(all.count(i), 1u) << i;
}

TEST(DistributedSamplerTest, PaddingRepeatsTheFirstIndicesOfThePermutation) {
  const int64_t n = 10;
  const int world = 4;  // total 12: two indices repeat
  auto ranks = AllRanks(n, world, false, 5, 0);
  std::vector<int64_t> order = TorchRandperm(n, 5);
  const std::multiset<int64_t> all = Together(ranks, 3);
  for (int64_t i = 0; i < n; ++i) {
    const size_t expected = (i == order[0] || i == order[1]) ? 2 : 1;
    EXPECT_EQ(all.count(i), expected) << i;
  }
  // Rank 2 and 3 end with the padding: positions 10 and 11 of the padded list.
  EXPECT_EQ(ranks[2].back(), order[0]);
  EXPECT_EQ(ranks[3].back(), order[1]);
}

TEST(DistributedSamplerTest, PaddingWrapsSeveralTimesWhenWorldExceedsN) {
  auto ranks = AllRanks(3, 8, false, 0, 0);
  std::vector<int64_t> order = TorchRandperm(3, 0);
  for (int r = 0; r < 8; ++r) {
    ASSERT_EQ(ranks[r].size(), 1u);
    EXPECT_EQ(ranks[r][0], order[r % 3]);
  }
}

TEST(DistributedSamplerTest, DropLastDropsTheTailAndNeverRepeats) {
  const std::multiset<int64_t> all = Together(AllRanks(10, 4, true, 5, 1), 2);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 8u);
  auto sampler = DistributedSampler::Create({10, 4, 0, true, true});
  ASSERT_OK(sampler);
  EXPECT_EQ(sampler->num_samples(), 2);
  EXPECT_EQ(sampler->total_size(), 8);
  // Fewer samples than ranks: nothing for anyone.
  auto tiny = DistributedSampler::Create({3, 4, 1, true, true});
  ASSERT_OK(tiny);
  EXPECT_EQ(tiny->num_samples(), 0);
  EXPECT_TRUE(tiny->EpochIndices(0, 0).empty());
}

TEST(DistributedSamplerTest, EachEpochHasANewOrderAndEachSeedToo) {
  auto e0 = AllRanks(100, 2, false, 11, 0);
  auto e1 = AllRanks(100, 2, false, 11, 1);
  auto other_seed = AllRanks(100, 2, false, 12, 0);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other_seed);
  EXPECT_EQ(e0, AllRanks(100, 2, false, 11, 0));
  // torch seeds with seed + epoch.
  EXPECT_EQ(e1, AllRanks(100, 2, false, 12, 0));
}

TEST(DistributedSamplerTest, WithoutShuffleRanksTakeConsecutiveStrides) {
  auto sampler = DistributedSampler::Create({7, 3, 1, /*shuffle=*/false, false});
  ASSERT_OK(sampler);
  EXPECT_EQ(sampler->EpochIndices(99, 5), (std::vector<int64_t>{1, 4, 0}));
}

TEST(DistributedSamplerTest, RejectsBadOptionsWithClearErrors) {
  EXPECT_THAT(DistributedSampler::Create({0, 1, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DistributedSampler::Create({10, 0, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  auto bad_rank = DistributedSampler::Create({10, 2, 2});
  EXPECT_THAT(bad_rank, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2")));
  EXPECT_THAT(DistributedSampler::Create({kMaxRandpermSize, 2, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The rest of `epoch` from `start` on `world` ranks, put back in global order: rank r's
// k-th index at position r + k * world.
std::vector<int64_t> RestInGlobalOrder(int64_t n, int world, bool drop_last, uint64_t seed,
                                       int64_t epoch, int64_t start) {
  std::vector<std::vector<int64_t>> ranks;
  for (int r = 0; r < world; ++r) {
    auto sampler = DistributedSampler::Create({n, world, r, /*shuffle=*/true, drop_last});
    EXPECT_OK(sampler);
    auto rest = sampler->RestOfEpochIndices(seed, epoch, start);
    EXPECT_OK(rest);
    EXPECT_EQ(rest->size(), ranks.empty() ? rest->size() : ranks[0].size()) << "rank " << r;
    ranks.push_back(*rest);
  }
  std::vector<int64_t> order(ranks[0].size() * world);
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < ranks[r].size(); ++k) order[r + k * world] = ranks[r][k];
  }
  return order;
}

TEST(DistributedSamplerTest, RestOfEpochContinuesTheGlobalOrderOnAnyWorldSize) {
  const int64_t n = 101;
  const std::vector<int64_t> order = TorchRandperm(n, 9 + 2);
  for (int64_t start : {0, 1, 24, 60, 99, 100}) {
    for (int world : {1, 2, 3, 4, 7}) {
      for (bool drop_last : {false, true}) {
        const std::vector<int64_t> rest = RestInGlobalOrder(n, world, drop_last, 9, 2, start);
        const int64_t left = n - start;
        const int64_t expected_size =
            (drop_last ? left / world : (left + world - 1) / world) * world;
        ASSERT_EQ(static_cast<int64_t>(rest.size()), expected_size)
            << "start " << start << " world " << world << " drop_last " << drop_last;
        // The order from `start` on, padded with the epoch's first indices.
        for (int64_t i = 0; i < expected_size; ++i) {
          EXPECT_EQ(rest[i], order[(start + i) % n]) << "position " << start + i;
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, RestOfEpochFromZeroOrAMultipleOfTheWorldIsTheEpochsTail) {
  for (bool drop_last : {false, true}) {
    for (int64_t start : {0, 12, 36}) {
      auto sampler = DistributedSampler::Create({50, 4, 3, /*shuffle=*/true, drop_last});
      ASSERT_OK(sampler);
      const std::vector<int64_t> whole = sampler->EpochIndices(5, 1);
      auto rest = sampler->RestOfEpochIndices(5, 1, start);
      ASSERT_OK(rest);
      EXPECT_EQ(*rest, std::vector<int64_t>(whole.begin() + start / 4, whole.end()))
          << "start " << start << " drop_last " << drop_last;
    }
  }
}

TEST(DistributedSamplerTest, RestOfEpochRefusesAPositionOutsideTheDataset) {
  auto sampler = DistributedSampler::Create({10, 2, 0});
  ASSERT_OK(sampler);
  EXPECT_THAT(sampler->RestOfEpochIndices(0, 0, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position 10")));
  EXPECT_THAT(sampler->RestOfEpochIndices(0, 0, -1), StatusIs(absl::StatusCode::kInvalidArgument));
}

struct TorchCase {
  int64_t n;
  int world;
  int rank;
  uint64_t seed;
  int64_t epoch;
  bool drop_last;
  bool shuffle;
};

TEST(DistributedSamplerTest, MatchesPyTorchDistributedSampler) {
  const std::vector<TorchCase> cases = {
      {1, 1, 0, 0, 0, false, true},
      {10, 1, 0, 0, 0, false, true},
      {10, 3, 0, 42, 0, false, true},
      {10, 3, 2, 42, 0, false, true},
      {10, 3, 1, 42, 0, true, true},
      {1000, 4, 3, 1234, 7, false, true},
      {1000, 8, 5, 1234, 7, true, true},
      {997, 16, 15, 2024, 3, false, true},
      {997, 16, 15, 2024, 3, true, true},
      {5, 8, 6, 9, 2, false, true},
      {50000, 7, 4, 12345678901ull, 5, false, true},
      {123, 5, 2, 3, 0, false, false},
      {123, 5, 4, 3, 0, true, false},
      {4096, 2, 1, 4294967295ull, 1, false, true},
  };
  std::vector<std::string> rows;
  for (const TorchCase& c : cases) {
    rows.push_back(absl::StrCat("(", c.n, ",", c.world, ",", c.rank, ",", c.seed, ",", c.epoch, ",",
                                c.drop_last ? "True" : "False", ",", c.shuffle ? "True" : "False",
                                ")"));
  }
  const std::string script = absl::StrCat(
      "import torch\n"
      "from torch.utils.data import DistributedSampler\n"
      "for n, w, r, seed, epoch, drop, shuffle in [",
      absl::StrJoin(rows, ","),
      "]:\n"
      "    s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=shuffle, seed=seed,"
      " drop_last=drop)\n"
      "    s.set_epoch(epoch)\n"
      "    print(\"OUT\", \" \".join(str(i) for i in s))\n");
  absl::StatusOr<std::string> output = testing::RunPython(script);
  ASSERT_OK(output) << output.status().message();
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(*output, '\n')) {
    if (absl::StartsWith(line, "OUT")) lines.emplace_back(line.substr(3));
  }
  ASSERT_EQ(lines.size(), cases.size()) << *output;
  for (size_t k = 0; k < cases.size(); ++k) {
    const TorchCase& c = cases[k];
    std::vector<int64_t> expected;
    for (absl::string_view token : absl::StrSplit(lines[k], ' ', absl::SkipEmpty())) {
      int64_t value;
      ASSERT_TRUE(absl::SimpleAtoi(token, &value)) << token;
      expected.push_back(value);
    }
    auto sampler = DistributedSampler::Create({c.n, c.world, c.rank, c.shuffle, c.drop_last});
    ASSERT_OK(sampler);
    EXPECT_EQ(sampler->EpochIndices(c.seed, c.epoch), expected) << "case " << rows[k];
    EXPECT_EQ(static_cast<int64_t>(expected.size()), sampler->num_samples()) << rows[k];
  }
}

}  // namespace
}  // namespace stoker::data_service
