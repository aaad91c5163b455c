// Job ids and ring segment names.
#include "common/names.h"

#include <string>

#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

using ::stoker::testing::StatusIs;

TEST(NamesTest, JobIdsOfLettersDigitsUnderscoresAndDashesAreValid) {
  EXPECT_OK(ValidateJobId("gpu07-4242-9f31c2aa"));
  EXPECT_OK(ValidateJobId("run_1"));
  EXPECT_OK(ValidateJobId("A"));
  EXPECT_OK(ValidateJobId(std::string(kMaxJobIdLength, 'a')));
}

TEST(NamesTest, JobIdsWithADotSlashOrSpaceAreRefused) {
  for (const char* id : {"a.b", ".", "../x", "bad/job", "a b", "a\nb"}) {
    const absl::Status status = ValidateJobId(id);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument)) << id;
    EXPECT_TRUE(absl::StrContains(status.message(), "--job_id")) << status;
  }
}

TEST(NamesTest, EmptyAndOverlongJobIdsAreRefused) {
  EXPECT_THAT(ValidateJobId(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateJobId(std::string(kMaxJobIdLength + 1, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NamesTest, RingSegmentNamesCarryJobRankAndSplit) {
  EXPECT_EQ(RingSegmentName("job-1", 0, /*train=*/true), "/stoker.job-1.ring.0");
  EXPECT_EQ(RingSegmentName("job-1", 12, /*train=*/false), "/stoker.job-1.ring.12.val");
}

TEST(NamesTest, RankFilePathsCarryTheRank) {
  EXPECT_EQ(RankFilePath("/out/samples.log", 0), "/out/samples.log.rank0");
  EXPECT_EQ(RankFilePath("trace.json", 12), "trace.json.rank12");
}

TEST(NamesTest, NoJobsRingNameStartsWithAnotherJobsPrefix) {
  // Why '.' is refused: job "a"'s names all start with "stoker.a.", which job "a.b"'s
  // would too.
  const std::string a = RingSegmentName("a", 0, true);
  const std::string ab = RingSegmentName("a-b", 0, true);
  EXPECT_NE(ab.rfind("/stoker.a.", 0), 0u);
  EXPECT_EQ(a.rfind("/stoker.a.", 0), 0u);
}

}  // namespace
}  // namespace stoker
