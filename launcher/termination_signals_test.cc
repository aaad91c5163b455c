#include "launcher/termination_signals.h"

#include <poll.h>
#include <signal.h>

#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

bool Readable(int fd) {
  pollfd entry = {fd, POLLIN, 0};
  return poll(&entry, 1, 0) == 1;
}

TEST(TerminationSignalsTest, TurnsSigtermIntoAReadableFdAndRemembersTheFirst) {
  absl::StatusOr<TerminationSignals> signals = TerminationSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  EXPECT_FALSE(Readable(signals->wake_fd()));
  EXPECT_EQ(signals->Take(), absl::nullopt);

  raise(SIGTERM);
  EXPECT_TRUE(Readable(signals->wake_fd()));
  raise(SIGINT);
  EXPECT_EQ(signals->Take(), SIGTERM);
  EXPECT_FALSE(Readable(signals->wake_fd()));
  EXPECT_EQ(signals->Take(), SIGTERM);
}

// Slurm's warning before the time limit (`--signal=B:USR1@120`) stops the job like SIGTERM.
TEST(TerminationSignalsTest, CatchesSigusr1AndSigusr2) {
  for (int signal : {SIGUSR1, SIGUSR2}) {
    absl::StatusOr<TerminationSignals> signals = TerminationSignals::Install();
    ASSERT_TRUE(signals.ok()) << signals.status();
    raise(signal);
    EXPECT_TRUE(Readable(signals->wake_fd()));
    EXPECT_EQ(signals->Take(), signal);
  }
}

TEST(TerminationSignalsTest, OnlyOneInstanceAtATime) {
  absl::StatusOr<TerminationSignals> first = TerminationSignals::Install();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(TerminationSignals::Install().status().code(), absl::StatusCode::kFailedPrecondition);
  TerminationSignals moved = std::move(*first);
  raise(SIGHUP);
  EXPECT_EQ(moved.Take(), SIGHUP);
}

TEST(TerminationSignalsTest, RestoresThePreviousHandlers) {
  signal(SIGHUP, SIG_IGN);
  {
    absl::StatusOr<TerminationSignals> signals = TerminationSignals::Install();
    ASSERT_TRUE(signals.ok());
  }
  struct sigaction current;
  sigaction(SIGHUP, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_IGN);
  signal(SIGHUP, SIG_DFL);
  // And a new instance can be installed again.
  EXPECT_TRUE(TerminationSignals::Install().ok());
}

}  // namespace
}  // namespace stoker::launcher
