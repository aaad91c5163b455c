#include "common/errno_status.h"

#include <cerrno>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(ErrnoStatusTest, MapsErrnoToCanonicalCodeAndNamesTheCall) {
  absl::Status status = ErrnoToStatus(ENOENT, "open /x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("open /x"), absl::string_view::npos);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EACCES, "open").code(), absl::StatusCode::kPermissionDenied);
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
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

}  // namespace
}  // namespace stoker
