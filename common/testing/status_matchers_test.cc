// Tests of the status matchers and assertions: what they accept, what they reject, and what
// their failure messages say.
#include "common/testing/status_matchers.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace stoker::testing {
namespace {

using ::testing::DescribeMatcher;
using ::testing::HasSubstr;
using ::testing::Matcher;
using ::testing::Not;

// What `matcher` says of `value` when asked to explain a (mis)match.
template <typename T, typename V>
std::string Explain(const Matcher<T>& matcher, const V& value) {
  ::testing::StringMatchResultListener listener;
  matcher.MatchAndExplain(value, &listener);
  return listener.str();
}

absl::StatusOr<int> Seven() { return 7; }
absl::StatusOr<int> NoNumber() { return absl::NotFoundError("no number in 'x'"); }

TEST(IsOkTest, MatchesOkStatusAndStatusOrWithValue) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(Seven(), IsOk());
  EXPECT_THAT(absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(1)), IsOk());
}

TEST(IsOkTest, RejectsErrorsAndSaysWhichStatus) {
  EXPECT_THAT(absl::InternalError("boom"), Not(IsOk()));
  EXPECT_THAT(NoNumber(), Not(IsOk()));
  const Matcher<const absl::Status&> matcher = IsOk();
  EXPECT_EQ(Explain(matcher, absl::InternalError("boom")), "whose status is INTERNAL: boom");
  EXPECT_EQ(DescribeMatcher<const absl::Status&>(IsOk()), "is OK");
  EXPECT_EQ(DescribeMatcher<const absl::Status&>(IsOk(), /*negation=*/true), "is not OK");
  const Matcher<const absl::StatusOr<int>&> or_matcher = IsOk();
  EXPECT_EQ(Explain(or_matcher, NoNumber()), "whose status is NOT_FOUND: no number in 'x'");
}

TEST(IsOkAndHoldsTest, MatchesTheValueWithAMatcherOrAValue) {
  EXPECT_THAT(Seven(), IsOkAndHolds(7));
  EXPECT_THAT(Seven(), IsOkAndHolds(::testing::Gt(6)));
  EXPECT_THAT(Seven(), Not(IsOkAndHolds(8)));
  EXPECT_THAT(NoNumber(), Not(IsOkAndHolds(::testing::_)));
  EXPECT_THAT(absl::StatusOr<std::vector<std::string>>(std::vector<std::string>{"a", "b"}),
              IsOkAndHolds(::testing::ElementsAre("a", "b")));
}

TEST(IsOkAndHoldsTest, ExplainsAnErrorOrAWrongValue) {
  const Matcher<const absl::StatusOr<int>&> matcher = IsOkAndHolds(8);
  EXPECT_EQ(Explain(matcher, NoNumber()), "whose status is NOT_FOUND: no number in 'x'");
  EXPECT_EQ(Explain(matcher, Seven()), "whose value 7 does not match");
  EXPECT_EQ(DescribeMatcher<const absl::StatusOr<int>&>(IsOkAndHolds(8)),
            "is OK and holds a value that is equal to 8");
  EXPECT_EQ(DescribeMatcher<const absl::StatusOr<int>&>(IsOkAndHolds(8), /*negation=*/true),
            "is not OK or holds a value that isn't equal to 8");
}

TEST(StatusIsTest, MatchesTheCodeAlone) {
  EXPECT_THAT(absl::InvalidArgumentError("bad"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(NoNumber(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Seven(), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(absl::OkStatus(), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(NoNumber(), Not(StatusIs(absl::StatusCode::kInternal)));
  EXPECT_THAT(Seven(), Not(StatusIs(absl::StatusCode::kNotFound)));
}

TEST(StatusIsTest, MatchesTheMessageWithAMatcherOrASubstring) {
  EXPECT_THAT(NoNumber(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no number")));
  EXPECT_THAT(NoNumber(), StatusIs(absl::StatusCode::kNotFound, ::testing::StartsWith("no ")));
  EXPECT_THAT(NoNumber(), StatusIs(absl::StatusCode::kNotFound, "in 'x'"));
  EXPECT_THAT(NoNumber(), StatusIs(absl::StatusCode::kNotFound, std::string("number")));
  EXPECT_THAT(NoNumber(), Not(StatusIs(absl::StatusCode::kNotFound, "a word")));
  EXPECT_THAT(NoNumber(), Not(StatusIs(absl::StatusCode::kInternal, "no number")));
}

TEST(StatusIsTest, ExplainsAWrongCodeOrMessage) {
  const Matcher<const absl::Status&> matcher =
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("file"));
  EXPECT_EQ(Explain(matcher, absl::InternalError("no file")), "whose status is INTERNAL: no file");
  EXPECT_EQ(Explain(matcher, absl::NotFoundError("no dir")),
            "whose status is NOT_FOUND: no dir, and whose message does not match");
  EXPECT_EQ(DescribeMatcher<const absl::Status&>(matcher),
            "has status code NOT_FOUND and a message that has substring \"file\"");
}

TEST(StatusIsTest, FailureMessageNamesExpectedAndActualStatus) {
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(NoNumber(), StatusIs(absl::StatusCode::kInvalidArgument, "number")),
      "whose status is NOT_FOUND: no number in 'x'");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Seven(), StatusIs(absl::StatusCode::kInvalidArgument)),
                          "OK: 7");
}

TEST(StatusMacrosTest, ExpectAndAssertOkPassOnOk) {
  EXPECT_OK(absl::OkStatus());
  EXPECT_OK(Seven());
  ASSERT_OK(absl::OkStatus());
  ASSERT_OK(Seven());
}

TEST(StatusMacrosTest, ExpectOkFailsWithTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(absl::DataLossError("torn")), "DATA_LOSS: torn");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(NoNumber()), "NOT_FOUND: no number");
}

void AssertOkOnError() { ASSERT_OK(absl::AbortedError("stopped")); }

TEST(StatusMacrosTest, AssertOkFailsFatallyWithTheStatus) {
  EXPECT_FATAL_FAILURE(AssertOkOnError(), "ABORTED: stopped");
}

TEST(StatusMacrosTest, AssertOkAndAssignDeclaresOrAssigns) {
  ASSERT_OK_AND_ASSIGN(const int seven, Seven());
  EXPECT_EQ(seven, 7);
  std::unique_ptr<int> owned;
  ASSERT_OK_AND_ASSIGN(owned, absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(3)));
  EXPECT_EQ(*owned, 3);
}

void AssignFromError(bool* reached) {
  ASSERT_OK_AND_ASSIGN(const int value, NoNumber());
  *reached = value > 0;
}

TEST(StatusMacrosTest, AssertOkAndAssignFailsFatallyAndStops) {
  static bool reached = false;
  EXPECT_FATAL_FAILURE(AssignFromError(&reached), "NoNumber() returned NOT_FOUND: no number");
  EXPECT_FALSE(reached);
}

}  // namespace
}  // namespace stoker::testing
