// Tests of MemoryLimit: --max_memory's values; the automatic limit is the address space in
// use plus the budget and follows the rings; under it a huge allocation fails instead of
// growing the process; a fixed limit refuses a ring that does not fit, and one below what
// the service already uses. Limits are set in a forked child, never in the test process.
#include "data_service/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/in_child.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

using testing::RunInChild;

uint64_t SoftLimit() {
  rlimit limit;
  getrlimit(RLIMIT_AS, &limit);
  return limit.rlim_cur;
}

TEST(ParseMaxMemoryTest, TakesAutoNoneAndSizes) {
  EXPECT_EQ(ParseMaxMemory("auto")->kind, MaxMemory::Kind::kAuto);
  EXPECT_EQ(ParseMaxMemory("none")->kind, MaxMemory::Kind::kNone);
  const std::pair<const char*, uint64_t> sizes[] = {
      {"8G", 8 * kGiB},     {"8GiB", 8 * kGiB}, {"512MiB", 512 * kMiB}, {"512M", 512 * kMiB},
      {"1073741824", kGiB}, {"64k", 64 << 10},  {"2T", 2048 * kGiB},    {"100B", 100}};
  for (const auto& [text, bytes] : sizes) {
    absl::StatusOr<MaxMemory> max = ParseMaxMemory(text);
    ASSERT_OK(max) << text << ": " << max.status();
    EXPECT_EQ(max->kind, MaxMemory::Kind::kBytes) << text;
    EXPECT_EQ(max->bytes, bytes) << text;
  }
  for (const char* bad : {"", "0", "-1", "8X", "G", "1.5G", "auto2", "99999999999999999999"}) {
    absl::StatusOr<MaxMemory> max = ParseMaxMemory(bad);
    EXPECT_THAT(max, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_THAT(max.status().message(), HasSubstr("--max_memory=")) << bad;
  }
}

TEST(MemoryLimitTest, TheAutomaticLimitIsTheBudgetAndFollowsTheRings) {
  if (kSanitized) GTEST_SKIP() << "no automatic limit under a sanitizer";
  EXPECT_EQ(RunInChild([] {
              const uint64_t in_use = *AddressSpaceInUse();
              auto limit = MemoryLimit::Install(MaxMemory{}, 2);
              if (!limit.ok()) return std::string(limit.status().message());
              const uint64_t expected = in_use + 2 * kDecodeThreadBudget + kMemoryMargin;
              const uint64_t set = (*limit)->limit_bytes();
              if (set != SoftLimit()) return absl::StrCat("RLIMIT_AS is ", SoftLimit());
              if (set < expected - 64 * kMiB || set > expected + 64 * kMiB) {
                return absl::StrCat("limit ", set, ", expected about ", expected);
              }
              if (!(*limit)->AddRing("/stoker.j.ring.0", kGiB).ok()) return std::string("AddRing");
              if (SoftLimit() != set + kGiB) return absl::StrCat("with a ring: ", SoftLimit());
              (*limit)->RemoveRing(kGiB);
              if (SoftLimit() != set) return absl::StrCat("without it: ", SoftLimit());
              const std::string line = (*limit)->Describe();
              if (line.find("--max_memory=auto: ") != 0 ||
                  line.find("2 decode threads") == std::string::npos) {
                return line;
              }
              return std::string();
            }),
            "");
}

TEST(MemoryLimitTest, UnderTheLimitAHugeAllocationFailsInsteadOfGrowingTheProcess) {
  if (kSanitized) GTEST_SKIP() << "no automatic limit under a sanitizer";
  EXPECT_EQ(RunInChild([] {
              auto limit = MemoryLimit::Install(MaxMemory{}, 1);
              if (!limit.ok()) return std::string(limit.status().message());
              void* p = std::malloc(10 * kGiB);
              if (p != nullptr) return std::string("malloc of 10 GiB succeeded");
              try {
                static char* volatile kept;
                kept = new char[20 * kGiB];
                delete[] kept;
                return std::string("new of 20 GiB succeeded");
              } catch (const std::bad_alloc&) {
              }
              // Ordinary allocations still work.
              void* small = std::malloc(64 * kMiB);
              if (small == nullptr) return std::string("malloc of 64 MiB failed");
              std::free(small);
              return std::string();
            }),
            "");
}

TEST(MemoryLimitTest, AFixedLimitRefusesARingThatDoesNotFit) {
  EXPECT_EQ(RunInChild([] {
              const uint64_t in_use = *AddressSpaceInUse();
              const uint64_t bytes = in_use + kMemoryMargin + 100 * kMiB;
              auto limit = MemoryLimit::Install(MaxMemory{MaxMemory::Kind::kBytes, bytes}, 4);
              if (!limit.ok()) return std::string(limit.status().message());
              if (SoftLimit() != bytes) return absl::StrCat("RLIMIT_AS is ", SoftLimit());
              if (!(*limit)->AddRing("/stoker.j.ring.0", 64 * kMiB).ok()) {
                return std::string("the first ring was refused");
              }
              const absl::Status refused = (*limit)->AddRing("/stoker.j.ring.1", 64 * kMiB);
              if (!absl::IsResourceExhausted(refused) ||
                  refused.message().find("ring /stoker.j.ring.1 needs 0.06 GiB but the data "
                                         "service's --max_memory=") == std::string::npos) {
                return absl::StrCat("second ring: ", refused.ToString());
              }
              if (SoftLimit() != bytes) return std::string("a fixed limit moved");
              return std::string();
            }),
            "");
}

TEST(MemoryLimitTest, AFixedLimitBelowWhatTheServiceUsesIsRefusedAndNoneSetsNothing) {
  const uint64_t before = SoftLimit();
  auto small = MemoryLimit::Install(MaxMemory{MaxMemory::Kind::kBytes, 16 * kMiB}, 1);
  EXPECT_THAT(small, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(small.status().message(),
              HasSubstr("--max_memory=16777216: the data service already uses"));
  auto none = MemoryLimit::Install(MaxMemory{MaxMemory::Kind::kNone, 0}, 1);
  ASSERT_OK(none);
  EXPECT_EQ((*none)->limit_bytes(), 0u);
  EXPECT_OK((*none)->AddRing("/r", kGiB));
  EXPECT_EQ(SoftLimit(), before);
  EXPECT_EQ((*none)->Describe(), "--max_memory=none: no memory limit");
}

}  // namespace
}  // namespace stoker::data_service
