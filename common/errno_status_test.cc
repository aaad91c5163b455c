#include "common/errno_status.h"

#include <cerrno>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ErrnoStatusTest, MapsErrnoToCanonicalCodeAndNamesTheCall) {
  absl::Status status = ErrnoToStatus(ENOENT, "open /x");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("open /x")));
  EXPECT_THAT(ErrnoToStatus(ENOSPC, "write"), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(ErrnoToStatus(EACCES, "open"), StatusIs(absl::StatusCode::kPermissionDenied));
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, PropagateErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(CheckEven(2));
  EXPECT_FALSE(CheckEven(3).ok());
}

}  // namespace
}  // namespace stoker
