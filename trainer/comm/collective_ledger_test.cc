#include "trainer/comm/collective_ledger.h"

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(CollectiveLedgerTest, SequenceNumbersFollowTheOrderOfIssue) {
  CollectiveLedger ledger("MPI");
  EXPECT_EQ(ledger.Issue(CollectiveKind::kBroadcast), 1u);
  ledger.Complete(1);
  EXPECT_EQ(ledger.Issue(CollectiveKind::kAllReduce), 2u);
  const CollectiveLedger::Snapshot snapshot = ledger.Read();
  EXPECT_EQ(snapshot.issued, 2u);
  EXPECT_EQ(snapshot.completed, 1u);
  EXPECT_EQ(snapshot.completed_kind, CollectiveKind::kBroadcast);
  EXPECT_EQ(snapshot.pending, 2u);
  EXPECT_EQ(snapshot.pending_kind, CollectiveKind::kAllReduce);
  EXPECT_EQ(ledger.channel(), "MPI");
}

TEST(CollectiveLedgerTest, NothingIsPendingOnceEveryOperationCompleted) {
  CollectiveLedger ledger("MPI");
  ledger.Complete(ledger.Issue(CollectiveKind::kAllReduce));
  const CollectiveLedger::Snapshot snapshot = ledger.Read();
  EXPECT_EQ(snapshot.pending, 0u);
  EXPECT_EQ(snapshot.completed, 1u);
}

TEST(CollectiveLedgerTest, CompletingOneCompletesEveryEarlierOperation) {
  CollectiveLedger ledger("NCCL");
  ledger.Issue(CollectiveKind::kAllReduce);
  const int64_t before = MonotonicNanos();
  ledger.Issue(CollectiveKind::kBroadcast);
  ledger.Issue(CollectiveKind::kAllReduce);
  ledger.Complete(2);
  const CollectiveLedger::Snapshot snapshot = ledger.Read();
  EXPECT_EQ(snapshot.completed, 2u);
  EXPECT_EQ(snapshot.completed_kind, CollectiveKind::kBroadcast);
  EXPECT_EQ(snapshot.pending, 3u);
  EXPECT_GE(snapshot.pending_since_ns, before);
}

TEST(CollectiveLedgerTest, LateOrUnknownCompletionsAreIgnored) {
  CollectiveLedger ledger("NCCL");
  ledger.Issue(CollectiveKind::kAllReduce);
  ledger.Issue(CollectiveKind::kAllReduce);
  ledger.Complete(2);
  ledger.Complete(1);  // late
  ledger.Complete(7);  // never issued
  const CollectiveLedger::Snapshot snapshot = ledger.Read();
  EXPECT_EQ(snapshot.completed, 2u);
  EXPECT_EQ(snapshot.issued, 2u);
  EXPECT_EQ(snapshot.pending, 0u);
}

TEST(CollectiveLedgerTest, MirrorCarriesTheCountersIntoTheSlot) {
  CollectiveLedger ledger("MPI");
  ledger.Complete(ledger.Issue(CollectiveKind::kBroadcast));
  ChannelProgress mirror;
  ledger.MirrorTo(&mirror);  // what happened before shows at once
  EXPECT_EQ(LoadAcquire(&mirror.completed), 1u);
  ledger.Issue(CollectiveKind::kAllReduce);
  EXPECT_EQ(LoadAcquire(&mirror.issued), 2u);
  EXPECT_EQ(LoadAcquire(&mirror.completed), 1u);
  EXPECT_EQ(static_cast<CollectiveKind>(LoadAcquire(&mirror.issued_kind)),
            CollectiveKind::kAllReduce);
  EXPECT_EQ(static_cast<CollectiveKind>(LoadAcquire(&mirror.completed_kind)),
            CollectiveKind::kBroadcast);
  EXPECT_GT(LoadAcquire(&mirror.issued_at_ns), 0);
  ledger.MirrorTo(nullptr);
  ledger.Complete(2);
  EXPECT_EQ(LoadAcquire(&mirror.completed), 1u);  // no longer mirrored
}

TEST(CollectiveKindTest, KindsHaveNames) {
  EXPECT_STREQ(CollectiveKindName(CollectiveKind::kAllReduce), "allreduce");
  EXPECT_STREQ(CollectiveKindName(CollectiveKind::kBroadcast), "broadcast");
  EXPECT_STREQ(CollectiveKindName(CollectiveKind::kNone), "none");
}

}  // namespace
}  // namespace stoker::trainer
