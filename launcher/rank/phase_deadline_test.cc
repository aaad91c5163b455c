// Tests of PhaseDeadline: a call that returns in time ends nothing; one that does not ends
// the process with 124, naming it. (AwaitPhase runs across ranks:
// //tests:fault_startup_stall_test.)
#include "launcher/rank/phase_deadline.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

TEST(PhaseDeadlineTest, ACallThatReturnsInTimeEndsNothing) {
  const absl::Time start = absl::Now();
  {
    PhaseDeadline deadline("a quick call", absl::Seconds(30));
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // the watchdog is joined at once
}

TEST(PhaseDeadlineDeathTest, ACallThatDoesNotReturnEndsTheProcessWith124NamingIt) {
  EXPECT_EXIT(
      {
        PhaseDeadline deadline("ncclCommDestroy", absl::Milliseconds(200));
        absl::SleepFor(absl::Seconds(30));
      },
      ::testing::ExitedWithCode(124),
      "timeout \\(exit 124\\): ncclCommDestroy did not return within 200ms");
}

}  // namespace
}  // namespace stoker::launcher
