// googletest matchers and assertions for absl::Status and absl::StatusOr<T>: Debian's Abseil
// (20220623) ships none. Each matcher takes either type and, on a mismatch, says which code
// and message the status had. Only tests link this.
//
//   EXPECT_THAT(Open(path), IsOk());
//   EXPECT_THAT(Open(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--path")));
//   EXPECT_THAT(ParseArgs(argv), IsOkAndHolds(ElementsAre("--np=2", "--epochs=3")));
//   ASSERT_OK_AND_ASSIGN(std::unique_ptr<Ring> ring, Ring::Create(layout));
#ifndef STOKER_COMMON_TESTING_STATUS_MATCHERS_H_
#define STOKER_COMMON_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// "OK" or "INVALID_ARGUMENT: the message".
inline std::string Describe(const absl::Status& status) { return status.ToString(); }

template <typename StatusType>
class IsOkMatcherImpl : public ::testing::MatcherInterface<StatusType> {
 public:
  void DescribeTo(std::ostream* os) const override { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const override { *os << "is not OK"; }
  bool MatchAndExplain(StatusType actual, ::testing::MatchResultListener* listener) const override {
    const absl::Status& status = GetStatus(actual);
    if (status.ok()) return true;
    *listener << "whose status is " << Describe(status);
    return false;
  }
};

// Polymorphic: converts to a Matcher of absl::Status or of any absl::StatusOr<T>.
class IsOkMatcher {
 public:
  template <typename StatusType>
  operator ::testing::Matcher<StatusType>() const {  // NOLINT(runtime/explicit)
    return ::testing::Matcher<StatusType>(new IsOkMatcherImpl<const StatusType&>());
  }
};

template <typename StatusType>
class StatusIsMatcherImpl : public ::testing::MatcherInterface<StatusType> {
 public:
  StatusIsMatcherImpl(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "has status code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "has a status code other than " << absl::StatusCodeToString(code_)
        << " or a message that ";
    message_.DescribeNegationTo(os);
  }
  bool MatchAndExplain(StatusType actual, ::testing::MatchResultListener* listener) const override {
    const absl::Status& status = GetStatus(actual);
    if (status.code() != code_) {
      *listener << "whose status is " << Describe(status);
      return false;
    }
    const std::string message(status.message());
    ::testing::StringMatchResultListener inner;
    if (!message_.MatchAndExplain(message, &inner)) {
      *listener << "whose status is " << Describe(status) << ", and whose message "
                << (inner.str().empty() ? "does not match" : inner.str());
      return false;
    }
    return true;
  }

 private:
  const absl::StatusCode code_;
  const ::testing::Matcher<const std::string&> message_;
};

// Polymorphic like IsOkMatcher.
class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename StatusType>
  operator ::testing::Matcher<StatusType>() const {  // NOLINT(runtime/explicit)
    return ::testing::Matcher<StatusType>(
        new StatusIsMatcherImpl<const StatusType&>(code_, message_));
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

template <typename StatusOrType>
class IsOkAndHoldsMatcherImpl : public ::testing::MatcherInterface<StatusOrType> {
 public:
  using Value = typename std::remove_cv_t<std::remove_reference_t<StatusOrType>>::value_type;

  template <typename InnerMatcher>
  explicit IsOkAndHoldsMatcherImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const Value&>(std::forward<InnerMatcher>(inner))) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and holds a value that ";
    inner_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK or holds a value that ";
    inner_.DescribeNegationTo(os);
  }
  bool MatchAndExplain(StatusOrType actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) {
      *listener << "whose status is " << Describe(actual.status());
      return false;
    }
    ::testing::StringMatchResultListener inner;
    const bool matches = inner_.MatchAndExplain(*actual, &inner);
    *listener << "whose value " << ::testing::PrintToString(*actual)
              << (matches ? " matches" : " does not match");
    if (!inner.str().empty()) *listener << ", " << inner.str();
    return matches;
  }

 private:
  const ::testing::Matcher<const Value&> inner_;
};

// Converts to a Matcher of any absl::StatusOr<T> whose T the inner matcher takes.
template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {  // NOLINT(runtime/explicit)
    return ::testing::Matcher<StatusOrType>(
        new IsOkAndHoldsMatcherImpl<const StatusOrType&>(inner_));
  }

 private:
  InnerMatcher inner_;
};

}  // namespace internal

// Matches an OK absl::Status, or an absl::StatusOr<T> that holds a value.
inline internal::IsOkMatcher IsOk() { return internal::IsOkMatcher(); }

// Matches a status (of an absl::Status or an absl::StatusOr<T>) with `code`, whatever its
// message.
inline internal::StatusIsMatcher StatusIs(absl::StatusCode code) {
  return internal::StatusIsMatcher(code, ::testing::_);
}

// Matches a status with `code` whose message matches `message`: a string matcher
// (HasSubstr, StartsWith, Eq), or a plain string, which the message must contain.
inline internal::StatusIsMatcher StatusIs(absl::StatusCode code,
                                          ::testing::Matcher<const std::string&> message) {
  return internal::StatusIsMatcher(code, std::move(message));
}
inline internal::StatusIsMatcher StatusIs(absl::StatusCode code, const char* substring) {
  return internal::StatusIsMatcher(code, ::testing::HasSubstr(std::string(substring)));
}
inline internal::StatusIsMatcher StatusIs(absl::StatusCode code, const std::string& substring) {
  return internal::StatusIsMatcher(code, ::testing::HasSubstr(substring));
}

// Matches an absl::StatusOr<T> that holds a value matching `inner` (a matcher or a value).
template <typename InnerMatcher>
internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(InnerMatcher&& inner) {
  return internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

}  // namespace stoker::testing

namespace absl {

// Prints an absl::StatusOr<T> in googletest's messages as its status, or "OK: " and its
// value where the value can be printed (Debian's Abseil has no printer for StatusOr).
template <typename T>
void PrintTo(const StatusOr<T>& status_or, std::ostream* os) {
  if (!status_or.ok()) {
    *os << status_or.status();
  } else {
    *os << "OK: " << ::testing::PrintToString(*status_or);
  }
}

}  // namespace absl

#define STOKER_TESTING_CONCAT_INNER_(a, b) a##b
#define STOKER_TESTING_CONCAT_(a, b) STOKER_TESTING_CONCAT_INNER_(a, b)

// EXPECT_OK(expr) / ASSERT_OK(expr): `expr` (an absl::Status or absl::StatusOr<T>) is OK;
// the message names the status it had otherwise.
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::stoker::testing::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::stoker::testing::IsOk())

// `ASSERT_OK_AND_ASSIGN(T x, StatusOr-expr);` declares or assigns `x` from the value, or
// fails the test (and returns from the enclosing void function) with the status.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  STOKER_ASSERT_OK_AND_ASSIGN_IMPL_(STOKER_TESTING_CONCAT_(stoker_statusor_, __LINE__), lhs, expr)

#define STOKER_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr)              \
  auto statusor = (expr);                                                   \
  ASSERT_TRUE(statusor.ok()) << #expr << " returned " << statusor.status(); \
  lhs = std::move(statusor).value()

#endif  // STOKER_COMMON_TESTING_STATUS_MATCHERS_H_
