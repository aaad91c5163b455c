#include "trainer/comm/collective_watchdog.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/comm/fake_communicator.h"

namespace stoker::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A communicator whose collectives the test drives through its ledger: one fake rank
// that stands in for an MPI communicator (Abort() cannot interrupt) or a NCCL one.
std::unique_ptr<FakeCommunicator> Fake(bool can_abort, const char* channel = "MPI") {
  FakeCommunicatorOptions options;
  options.can_abort = can_abort;
  options.channel = channel;
  return std::move(FakeCommunicator::Group(1, options)[0]);
}

// What the injected exit function saw. Shared: the process deadline thread may call it
// after the test is over.
struct ExitRecord {
  std::atomic<int> code{-1};
  std::atomic<int64_t> at_ns{0};
  absl::Notification exited;
};

CollectiveWatchdog::ExitFunction RecordExit(std::shared_ptr<ExitRecord> record) {
  return [record](int code) {
    if (record->code.exchange(code) != -1) return;
    record->at_ns = MonotonicNanos();
    record->exited.Notify();
  };
}

CollectiveWatchdogOptions Short() {
  CollectiveWatchdogOptions options;
  options.timeout = absl::Milliseconds(200);
  options.abort_grace = absl::Milliseconds(300);
  options.poll_interval = absl::Milliseconds(10);
  return options;
}

// A watchdog with Short() options over `watched` for rank 0 of 2, without a node table,
// whose exits go to `record`.
absl::StatusOr<std::unique_ptr<CollectiveWatchdog>> Watch(std::vector<Communicator*> watched,
                                                          std::shared_ptr<ExitRecord> record) {
  return CollectiveWatchdog::Start(Short(), WatchedRank{0, 2, 0, 0}, std::move(watched), nullptr,
                                   RecordExit(std::move(record)));
}

// A watchdog (Watch()) that saw a collective never complete, and what it did about it.
struct StuckCollective {
  std::shared_ptr<ExitRecord> record = std::make_shared<ExitRecord>();
  std::unique_ptr<CollectiveWatchdog> watchdog;
  int64_t nanos_to_exit = -1;  // from the collective's issue; -1: no exit within 10 s
};

// Starts a watchdog (Watch()) over `watched`, issues on `stuck` (one of them) a collective
// that never completes, and waits (at most 10 s) for the exit.
absl::StatusOr<StuckCollective> WatchAStuckCollective(std::vector<Communicator*> watched,
                                                      FakeCommunicator& stuck) {
  StuckCollective outcome;
  absl::StatusOr<std::unique_ptr<CollectiveWatchdog>> watchdog =
      Watch(std::move(watched), outcome.record);
  if (!watchdog.ok()) return watchdog.status();
  outcome.watchdog = std::move(*watchdog);
  const int64_t start = MonotonicNanos();
  stuck.ledger()->Issue(CollectiveKind::kAllReduce);
  if (outcome.record->exited.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    outcome.nanos_to_exit = outcome.record->at_ns.load() - start;
  }
  return outcome;
}

TEST(CollectiveWatchdogTest, AStuckMpiCollectiveEndsTheProcessAtOnce) {
  auto mpi_rank = Fake(/*can_abort=*/false);
  FakeCommunicator& mpi = *mpi_rank;
  absl::StatusOr<StuckCollective> stuck = WatchAStuckCollective({&mpi}, mpi);
  ASSERT_OK(stuck);
  ASSERT_NE(stuck->nanos_to_exit, -1) << "no exit";
  EXPECT_EQ(stuck->record->code.load(), 1);
  EXPECT_GE(stuck->nanos_to_exit, 200'000'000);
  EXPECT_LT(stuck->nanos_to_exit, 250'000'000 + 300'000'000);  // well before the grace
  EXPECT_EQ(mpi.aborts(), 1);
  EXPECT_TRUE(stuck->watchdog->fired());
}

TEST(CollectiveWatchdogTest, AnAbortedCommunicatorStillMeetsTheProcessDeadline) {
  auto nccl_rank = Fake(/*can_abort=*/true, "NCCL");
  FakeCommunicator& nccl = *nccl_rank;
  absl::StatusOr<StuckCollective> stuck = WatchAStuckCollective({&nccl}, nccl);
  ASSERT_OK(stuck);
  // The abort "did not end the process": the deadline thread does, after the grace.
  ASSERT_NE(stuck->nanos_to_exit, -1) << "no exit";
  EXPECT_EQ(nccl.aborts(), 1);
  EXPECT_EQ(stuck->record->code.load(), 1);
  EXPECT_GE(stuck->nanos_to_exit, 500'000'000);  // timeout + grace
}

TEST(CollectiveWatchdogTest, AnAbortThatHangsStillMeetsTheProcessDeadline) {
  // A communicator whose Abort() hangs until released (an ncclCommAbort that never returns).
  auto nccl_rank = Fake(/*can_abort=*/true, "NCCL");
  FakeCommunicator& nccl = *nccl_rank;
  absl::Notification release;
  nccl.set_on_abort([&release] { release.WaitForNotification(); });
  absl::StatusOr<StuckCollective> stuck = WatchAStuckCollective({&nccl}, nccl);
  ASSERT_OK(stuck);
  ASSERT_NE(stuck->nanos_to_exit, -1) << "no exit";
  EXPECT_EQ(stuck->record->code.load(), 1);
  EXPECT_GE(stuck->nanos_to_exit, 500'000'000);  // timeout + grace
  EXPECT_LT(stuck->nanos_to_exit, 2'000'000'000);
  release.Notify();  // lets the watchdog thread finish, so that it can be joined
}

TEST(CollectiveWatchdogTest, AnAsynchronousErrorFiresAtOnceNotAtTheTimeout) {
  // A network fault as NCCL reports it (ncclCommGetAsyncError): seen at the next poll, with
  // a 60 s collective timeout, whether or not a collective is waiting.
  for (bool waiting : {true, false}) {
    auto nccl_rank = Fake(/*can_abort=*/true, "NCCL");
    FakeCommunicator& nccl = *nccl_rank;
    auto record = std::make_shared<ExitRecord>();
    CollectiveWatchdogOptions options = Short();
    options.timeout = absl::Seconds(60);
    auto watchdog = CollectiveWatchdog::Start(options, WatchedRank{0, 2, 0, 0}, {&nccl}, nullptr,
                                              RecordExit(record));
    ASSERT_OK(watchdog);
    if (waiting) nccl.ledger()->Issue(CollectiveKind::kAllReduce);
    const int64_t start = MonotonicNanos();
    nccl.set_async_error(absl::UnavailableError(
        "NCCL reports an asynchronous error on the communicator of 2 ranks: remote process "
        "exited or there was a network error"));
    ASSERT_TRUE(record->exited.WaitForNotificationWithTimeout(absl::Seconds(10))) << waiting;
    EXPECT_EQ(nccl.aborts(), 1);
    EXPECT_TRUE((*watchdog)->fired());
    EXPECT_LT(record->at_ns.load() - start, 5'000'000'000);  // the grace, not the 60 s timeout
  }
}

TEST(CollectiveWatchdogTest, AnIdleMpiCommunicatorDoesNotCutTheNcclAbortShort) {
  auto nccl_rank = Fake(/*can_abort=*/true, "NCCL");
  auto mpi_rank = Fake(/*can_abort=*/false, "MPI");
  FakeCommunicator& nccl = *nccl_rank;
  FakeCommunicator& mpi = *mpi_rank;
  // Stuck on the device; MPI is idle.
  absl::StatusOr<StuckCollective> stuck = WatchAStuckCollective({&nccl, &mpi}, nccl);
  ASSERT_OK(stuck);
  ASSERT_NE(stuck->nanos_to_exit, -1) << "no exit";
  EXPECT_EQ(nccl.aborts(), 1);
  EXPECT_EQ(mpi.aborts(), 1);
  EXPECT_GE(stuck->nanos_to_exit, 500'000'000);  // the grace, not at once
}

TEST(CollectiveWatchdogTest, ARankWhoseNodeIsCaughtUpLetsTheCulpritsNodeReportFirst) {
  auto table =
      CollectiveProgressTable::Create(absl::StrCat("/stoker.watchdogtest-", getpid(), "-defer"), 2);
  ASSERT_OK(table);
  ASSERT_OK(table->Unlink());
  // Two local ranks of a 4-rank job, both waiting in #1: the hold-up is on the other node.
  auto first_rank = Fake(false), second_rank = Fake(false);
  FakeCommunicator &first = *first_rank, &second = *second_rank;
  auto first_exit = std::make_shared<ExitRecord>();
  auto second_exit = std::make_shared<ExitRecord>();
  auto first_watchdog = CollectiveWatchdog::Start(Short(), WatchedRank{0, 4, 0, 0}, {&first},
                                                  &*table, RecordExit(first_exit));
  auto second_watchdog = CollectiveWatchdog::Start(Short(), WatchedRank{1, 4, 1, 0}, {&second},
                                                   &*table, RecordExit(second_exit));
  ASSERT_TRUE(first_watchdog.ok() && second_watchdog.ok());
  const int64_t start = MonotonicNanos();
  first.ledger()->Issue(CollectiveKind::kAllReduce);
  second.ledger()->Issue(CollectiveKind::kAllReduce);
  ASSERT_TRUE(first_exit->exited.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(first_exit->at_ns.load() - start, 3'200'000'000);  // timeout + the deferral
  EXPECT_LT(first_exit->at_ns.load() - start, 5'000'000'000);
}

TEST(CollectiveWatchdogTest, ARankWithAStalledLocalPeerFiresAtTheTimeout) {
  auto table = CollectiveProgressTable::Create(
      absl::StrCat("/stoker.watchdogtest-", getpid(), "-nodefer"), 2);
  ASSERT_OK(table);
  ASSERT_OK(table->Unlink());
  RankProgress& stopped = table->slot(1);
  stopped.pid = getpid();
  stopped.heartbeat_ns = MonotonicNanos() - 10'000'000'000;
  stopped.rank = 1;
  auto mpi_rank = Fake(false);
  FakeCommunicator& mpi = *mpi_rank;
  auto record = std::make_shared<ExitRecord>();
  auto watchdog = CollectiveWatchdog::Start(Short(), WatchedRank{0, 4, 0, 0}, {&mpi}, &*table,
                                            RecordExit(record));
  ASSERT_OK(watchdog);
  const int64_t start = MonotonicNanos();
  mpi.ledger()->Issue(CollectiveKind::kAllReduce);
  ASSERT_TRUE(record->exited.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(record->at_ns.load() - start, 1'000'000'000);
}

TEST(CollectiveWatchdogTest, CollectivesThatCompleteInTimeNeverFire) {
  auto mpi_rank = Fake(/*can_abort=*/false);
  FakeCommunicator& mpi = *mpi_rank;
  auto record = std::make_shared<ExitRecord>();
  auto watchdog = Watch({&mpi, &mpi}, record);
  ASSERT_OK(watchdog);
  for (int i = 0; i < 50; ++i) {
    const uint64_t seq = mpi.ledger()->Issue(CollectiveKind::kAllReduce);
    absl::SleepFor(absl::Milliseconds(10));
    mpi.ledger()->Complete(seq);
  }
  // Time outside collectives is not watched.
  EXPECT_FALSE(record->exited.WaitForNotificationWithTimeout(absl::Milliseconds(500)));
  EXPECT_FALSE((*watchdog)->fired());
  EXPECT_EQ(mpi.aborts(), 0);
}

TEST(CollectiveWatchdogTest, BadOptionsAreRejected) {
  auto mpi_rank = Fake(false);
  FakeCommunicator& mpi = *mpi_rank;
  CollectiveWatchdogOptions options = Short();
  options.timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(
      CollectiveWatchdog::Start(options, WatchedRank{}, {&mpi}, nullptr).status()));
  options = Short();
  options.abort_grace = absl::Seconds(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(
      CollectiveWatchdog::Start(options, WatchedRank{}, {&mpi}, nullptr).status()));
}

TEST(CollectiveWatchdogTest, TheDefaultPollIntervalFollowsTheTimeout) {
  auto mpi_rank = Fake(false);
  FakeCommunicator& mpi = *mpi_rank;
  CollectiveWatchdogOptions options;
  options.timeout = absl::Seconds(300);
  auto slow = CollectiveWatchdog::Start(options, WatchedRank{}, {&mpi}, nullptr);
  ASSERT_OK(slow);
  EXPECT_EQ((*slow)->poll_interval(), absl::Seconds(1));
  options.timeout = absl::Seconds(2);
  auto fast = CollectiveWatchdog::Start(options, WatchedRank{}, {&mpi}, nullptr);
  ASSERT_OK(fast);
  EXPECT_EQ((*fast)->poll_interval(), absl::Milliseconds(200));
}

TEST(CollectiveWatchdogTest, TheWatchdogPublishesItsRankProgressAndHeartbeat) {
  auto table =
      CollectiveProgressTable::Create(absl::StrCat("/stoker.watchdogtest-", getpid(), "-pub"), 2);
  ASSERT_OK(table);
  ASSERT_OK(table->Unlink());
  auto mpi_rank = Fake(false);
  FakeCommunicator& mpi = *mpi_rank;
  auto watchdog = CollectiveWatchdog::Start(Short(), WatchedRank{5, 8, 1, 0}, {&mpi}, &*table);
  ASSERT_OK(watchdog);
  mpi.ledger()->Complete(mpi.ledger()->Issue(CollectiveKind::kBroadcast));
  const RankProgress& slot = table->slot(1);
  EXPECT_EQ(LoadAcquire(&slot.rank), 5);
  EXPECT_EQ(LoadAcquire(&slot.pid), getpid());
  EXPECT_EQ(LoadAcquire(&slot.channels[0].completed), 1u);
  const int64_t first = LoadAcquire(&slot.heartbeat_ns);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_GT(LoadAcquire(&slot.heartbeat_ns), first);
}

TEST(CollectiveWatchdogTest, NodeProgressTellsStoppedGoneAndWaitingRanksApart) {
  auto table =
      CollectiveProgressTable::Create(absl::StrCat("/stoker.watchdogtest-", getpid(), "-read"), 3);
  ASSERT_OK(table);
  ASSERT_OK(table->Unlink());
  const int64_t now = MonotonicNanos();
  // Local rank 0: waiting in #58 for 2 s, beating.
  RankProgress& waiting = table->slot(0);
  waiting.pid = getpid();
  waiting.heartbeat_ns = now;
  waiting.channels[0].issued = 58;
  waiting.channels[0].completed = 57;
  waiting.channels[0].completed_kind = static_cast<uint32_t>(CollectiveKind::kAllReduce);
  waiting.channels[0].issued_at_ns = now - 2'000'000'000;
  waiting.rank = 0;
  // Local rank 1: completed #57, no heartbeat for 10 s (stopped).
  RankProgress& stopped = table->slot(1);
  stopped.pid = getppid();
  stopped.heartbeat_ns = now - 10'000'000'000;
  stopped.channels[0].issued = 57;
  stopped.channels[0].completed = 57;
  stopped.rank = 1;
  // Local rank 2: its process is gone.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  RankProgress& gone = table->slot(2);
  gone.pid = child;
  gone.heartbeat_ns = now;
  gone.channels[0].issued = 56;
  gone.channels[0].completed = 56;
  gone.rank = 2;

  const std::vector<NodeRankState> rows = ReadNodeProgress(*table, 0, now, absl::Seconds(5));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_FALSE(rows[0].stalled);
  EXPECT_FALSE(rows[0].gone);
  EXPECT_NEAR(rows[0].waiting_s, 2.0, 0.01);
  EXPECT_EQ(rows[0].completed_kind, CollectiveKind::kAllReduce);
  EXPECT_TRUE(rows[1].stalled);
  EXPECT_FALSE(rows[1].gone);
  EXPECT_NEAR(rows[1].heartbeat_age_s, 10.0, 0.01);
  EXPECT_TRUE(rows[2].gone);
  EXPECT_EQ(rows[2].completed, 56u);
}

StalledCollective ThreeRanksOnTwoNodes() {
  StalledCollective stall;
  stall.rank = 0;
  stall.world_size = 5;
  stall.node_index = 0;
  stall.channel = "MPI";
  stall.seq = 58;
  stall.kind = CollectiveKind::kAllReduce;
  stall.waited_s = 10.04;
  stall.timeout = absl::Seconds(10);
  NodeRankState waiting{0, 100, false, 0.1, false, 58, 57, CollectiveKind::kAllReduce, 10.0};
  NodeRankState stopped{1, 101, false, 10.4, true, 57, 57, CollectiveKind::kAllReduce, 0};
  NodeRankState also_waiting{2, 102, false, 0.2, false, 58, 57, CollectiveKind::kAllReduce, 9.9};
  stall.node = {waiting, stopped, also_waiting};
  return stall;
}

TEST(DescribeStalledCollectiveTest, NamesTheStalledRankAndTheLastCollectiveOfEachRank) {
  const std::string text = DescribeStalledCollective(ThreeRanksOnTwoNodes());
  EXPECT_THAT(text, HasSubstr("collective #58 (allreduce) on the MPI communicator has not "
                              "completed after 10.0s (--collective_timeout_s=10)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "not reached by rank 1 (pid 101): stalled: no heartbeat for 10.4s (stopped or hung)"));
  EXPECT_THAT(text,
              HasSubstr("Last collective each rank of node 0 completed: rank 0 #57 (allreduce), "
                        "waiting in #58 for 10.0s; rank 1 #57 (allreduce), no heartbeat for "
                        "10.4s; rank 2 #57 (allreduce), waiting in #58 for 9.9s"));
  EXPECT_THAT(text, HasSubstr("2 of 5 ranks are on other nodes and not visible here"));
  EXPECT_THAT(text, Not(HasSubstr("not reached by rank 0")));
}

TEST(DescribeStalledCollectiveTest, GoneRanksAndRanksElsewhereAreSaidSo) {
  StalledCollective stall = ThreeRanksOnTwoNodes();
  stall.node[1].stalled = false;
  stall.node[1].gone = true;
  EXPECT_THAT(DescribeStalledCollective(stall),
              HasSubstr("rank 1 (pid 101): gone: pid 101 no longer exists"));
  stall.node[1].issued = 58;  // it reached #58 and died inside it
  EXPECT_THAT(
      DescribeStalledCollective(stall),
      HasSubstr("every rank of node 0 reached it; stuck inside it: rank 1 (pid 101): gone"));
  stall.node[1].gone = false;  // alive and waiting in #58 like the others
  stall.node[1].waiting_s = 10.0;
  EXPECT_THAT(
      DescribeStalledCollective(stall),
      HasSubstr(
          "every rank of node 0 reached it, so the ranks holding it up are on other nodes. "));
  stall.node[1].gone = true;
  EXPECT_THAT(DescribeStalledCollective(stall),
              HasSubstr("rank 1 #57 (allreduce), inside #58, gone"));
}

TEST(DescribeStalledCollectiveTest, ARankWaitingInAnEarlierCollectiveIsSaidToBe) {
  StalledCollective stall = ThreeRanksOnTwoNodes();
  stall.node[1] =
      NodeRankState{1, 101, false, 0.1, false, 57, 56, CollectiveKind::kAllReduce, 10.0};
  EXPECT_THAT(DescribeStalledCollective(stall),
              HasSubstr("not reached by rank 1 (pid 101): waiting in the earlier #57 for 10.0s"));
  stall.node[1].issued = 56;
  EXPECT_THAT(DescribeStalledCollective(stall),
              HasSubstr("not reached by rank 1 (pid 101): alive, busy outside collectives"));
}

TEST(DescribeStalledCollectiveTest, WithoutATableItSaysWhatItKnows) {
  StalledCollective stall = ThreeRanksOnTwoNodes();
  stall.node.clear();
  EXPECT_THAT(DescribeStalledCollective(stall), HasSubstr("no progress table"));
}

}  // namespace
}  // namespace stoker::trainer
