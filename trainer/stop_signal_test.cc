// The stop signals are recorded, not fatal, the first time; the second one is fatal.
#include "trainer/stop_signal.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

// Each test starts with the handlers installed and no stop signal recorded, and leaves none.
class StopSignalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InstallStopSignalHandlers().ok());
    SetStopSignalForTest(0);
  }
  void TearDown() override { SetStopSignalForTest(0); }
};

TEST_F(StopSignalTest, FirstSigtermIsRecordedAndTheProcessLives) {
  EXPECT_EQ(StopSignalReceived(), 0);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(StopSignalReceived(), SIGTERM);
}

TEST_F(StopSignalTest, SigintIsRecordedToo) {
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(StopSignalReceived(), SIGINT);
}

TEST_F(StopSignalTest, Sigusr2IsAStopSignalAndAnotherKindLaterChangesNothing) {
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_EQ(StopSignalReceived(), SIGUSR2);
  ASSERT_EQ(raise(SIGTERM), 0);  // still alive
  EXPECT_EQ(StopSignalReceived(), SIGUSR2);
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
