// The stop signals are recorded, not fatal, the first time; the second one is fatal.
#include "trainer/stop_signal.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(StopSignalTest, FirstSigtermIsRecordedAndTheProcessLives) {
  ASSERT_TRUE(InstallStopSignalHandlers().ok());
  SetStopSignalForTest(0);
  EXPECT_EQ(StopSignalReceived(), 0);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(StopSignalReceived(), SIGTERM);
  SetStopSignalForTest(0);
}

TEST(StopSignalTest, SigintIsRecordedToo) {
  ASSERT_TRUE(InstallStopSignalHandlers().ok());
  SetStopSignalForTest(0);
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(StopSignalReceived(), SIGINT);
  SetStopSignalForTest(0);
}

TEST(StopSignalTest, Sigusr2IsAStopSignalAndAnotherKindLaterChangesNothing) {
  ASSERT_TRUE(InstallStopSignalHandlers().ok());
  SetStopSignalForTest(0);
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_EQ(StopSignalReceived(), SIGUSR2);
  ASSERT_EQ(raise(SIGTERM), 0);  // still alive
  EXPECT_EQ(StopSignalReceived(), SIGUSR2);
  SetStopSignalForTest(0);
}

TEST(StopSignalDeathTest, ASecondSignalOfTheSameKindKills) {
  EXPECT_EXIT(
      {
        InstallStopSignalHandlers().IgnoreError();
        raise(SIGTERM);
        raise(SIGTERM);
      },
      testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace stoker::trainer
