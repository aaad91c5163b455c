// TorchCall turns libtorch's exceptions into Status and passes every result through.
#include "common/torch_status.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <memory>
#include <stdexcept>

#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

using ::stoker::testing::StatusIs;

// A libtorch call that throws c10::Error: a view of 2 elements as 3.
at::Tensor BadView() { return at::ones({2}).view({3}); }

TEST(TorchErrorStatusTest, ATorchErrorIsInternalWithLibtorchsMessageAndNoBacktrace) {
  try {
    BadView();
    FAIL() << "view did not throw";
  } catch (const c10::Error& e) {
    const absl::Status status = TorchErrorStatus(e, "reshaping");
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal));
    EXPECT_TRUE(absl::StartsWith(status.message(), "reshaping: libtorch: ")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), e.what_without_backtrace())) << status;
    EXPECT_FALSE(absl::StrContains(status.message(), "Exception raised from")) << status;
  }
}

TEST(TorchErrorStatusTest, AStdExceptionKeepsItsWhat) {
  const absl::Status status = TorchErrorStatus(std::out_of_range("index 7"), "looking up");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(status.message(), "looking up: index 7");
}

TEST(TorchCallTest, AVoidCallGivesOkOrTheError) {
  int calls = 0;
  absl::Status ok = TorchCall("counting", [&] { ++calls; });
  EXPECT_OK(ok);
  EXPECT_EQ(calls, 1);
  absl::Status failed = TorchCall("viewing", [] { BadView(); });
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kInternal));
  EXPECT_TRUE(absl::StartsWith(failed.message(), "viewing: libtorch: ")) << failed;
}

TEST(TorchCallTest, AReturnedStatusPassesUnchanged) {
  absl::Status status = TorchCall("checking", [] { return absl::InvalidArgumentError("no"); });
  EXPECT_EQ(status, absl::InvalidArgumentError("no"));
  EXPECT_OK(TorchCall("checking", [] { return absl::OkStatus(); }));
}

TEST(TorchCallTest, AValueBecomesAStatusOr) {
  absl::StatusOr<at::Tensor> sum = TorchCall("summing", [] { return at::ones({3}).sum(); });
  ASSERT_OK(sum);
  EXPECT_EQ(sum->item<float>(), 3.0f);
  absl::StatusOr<at::Tensor> bad = TorchCall("viewing", [] { return BadView(); });
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInternal));
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "viewing: libtorch: ")) << bad.status();
}

TEST(TorchCallTest, AStatusOrPassesUnchangedAndMoveOnlyValuesWork) {
  absl::StatusOr<std::unique_ptr<int>> value = TorchCall(
      "making", []() -> absl::StatusOr<std::unique_ptr<int>> { return std::make_unique<int>(4); });
  ASSERT_OK(value);
  EXPECT_EQ(**value, 4);
  absl::StatusOr<int> error =
      TorchCall("making", []() -> absl::StatusOr<int> { return absl::NotFoundError("gone"); });
  EXPECT_EQ(error.status(), absl::NotFoundError("gone"));
  absl::StatusOr<int> thrown =
      TorchCall("making", []() -> absl::StatusOr<int> { throw std::runtime_error("boom"); });
  EXPECT_EQ(thrown.status(), absl::InternalError("making: boom"));
}

TEST(TorchCallTest, TheCallableMayBeAnLvalue) {
  auto f = [] { return 5; };
  absl::StatusOr<int> five = TorchCall("five", f);
  ASSERT_OK(five);
  EXPECT_EQ(*five, 5);
}

}  // namespace
}  // namespace stoker
