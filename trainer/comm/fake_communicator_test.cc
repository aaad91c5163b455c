// The fake passes the Communicator conformance suite as one rank and as three ranks in
// threads; its fault seams do what tests rely on.
#include "trainer/comm/fake_communicator.h"

#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/comm/communicator_conformance.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;

// A group of `world_size` fakes, one thread per rank, over host memory.
class FakeTarget final : public HostMemoryConformanceTarget {
 public:
  explicit FakeTarget(int world_size) : world_size_(world_size) {}

  void RunOnEveryRank(const std::function<void(Communicator&)>& body) override {
    FakeCommunicatorOptions options;
    options.peer_timeout = absl::Seconds(20);
    std::vector<std::unique_ptr<FakeCommunicator>> group =
        FakeCommunicator::Group(world_size_, options);
    if (world_size_ == 1) {
      body(*group[0]);
      return;
    }
    std::vector<std::thread> ranks;
    for (const auto& comm : group) ranks.emplace_back([&body, comm = comm.get()] { body(*comm); });
    for (std::thread& rank : ranks) rank.join();
  }
  bool Supports(ElementType, ReduceOp) const override { return true; }
  bool can_abort() const override { return true; }
  bool can_interrupt_a_waiting_rank() const override { return world_size_ > 1; }
  bool can_fail_next() const override { return true; }
  void FailNext(Communicator& communicator, const absl::Status& status) override {
    static_cast<FakeCommunicator&>(communicator).fail_next(status);
  }

 private:
  const int world_size_;
};

INSTANTIATE_TEST_SUITE_P(
    Fake, CommunicatorConformanceTest,
    ::testing::Values(CommunicatorConformanceParam{"OneRank",
                                                   [] { return std::make_unique<FakeTarget>(1); }},
                      CommunicatorConformanceParam{"ThreeRanksInThreads",
                                                   [] { return std::make_unique<FakeTarget>(3); }}),
    CommunicatorConformanceParamName);

// Runs body(rank's communicator) on one thread per rank.
void OnEveryRank(std::vector<std::unique_ptr<FakeCommunicator>>& group,
                 const std::function<void(FakeCommunicator&)>& body) {
  std::vector<std::thread> ranks;
  for (const auto& comm : group) ranks.emplace_back([&body, comm = comm.get()] { body(*comm); });
  for (std::thread& rank : ranks) rank.join();
}

TEST(FakeCommunicatorTest, CollectivesThatDifferBetweenRanksFailOnEveryRank) {
  auto group = FakeCommunicator::Group(2);
  std::vector<absl::Status> results(2);
  OnEveryRank(group, [&](FakeCommunicator& comm) {
    float x[4] = {1, 2, 3, 4};
    results[comm.rank()] = comm.rank() == 0
                               ? comm.AllReduce(x, 4, ElementType::kFloat32, ReduceOp::kSum)
                               : comm.Broadcast(x, sizeof(x), 0);
  });
  EXPECT_FALSE(results[0].ok());
  EXPECT_FALSE(results[1].ok());
  const absl::Status& invalid = absl::IsInvalidArgument(results[0]) ? results[0] : results[1];
  EXPECT_THAT(invalid, StatusIs(absl::StatusCode::kInvalidArgument))
      << results[0] << " / " << results[1];
  EXPECT_NE(invalid.message().find("same order on every rank"), absl::string_view::npos) << invalid;
}

TEST(FakeCommunicatorTest, APeerThatNeverJoinsIsDeadlineExceeded) {
  FakeCommunicatorOptions options;
  options.peer_timeout = absl::Milliseconds(200);
  auto group = FakeCommunicator::Group(2, options);
  float x = 1;
  const absl::Time start = absl::Now();
  const absl::Status status = group[0]->AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kSum);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(x, 1);
  const CollectiveLedger::Snapshot ledger = group[0]->ledger()->Read();
  EXPECT_EQ(ledger.issued, 1u);
  EXPECT_EQ(ledger.completed, 1u);  // a failed collective is not waiting any more
}

TEST(FakeCommunicatorTest, AFakeThatCannotAbortSaysSoAndGoesOn) {
  FakeCommunicatorOptions options;
  options.can_abort = false;
  options.channel = "MPI";
  auto group = FakeCommunicator::Group(1, options);
  FakeCommunicator& comm = *group[0];
  EXPECT_EQ(comm.ledger()->channel(), "MPI");
  EXPECT_FALSE(comm.Abort());
  EXPECT_EQ(comm.aborts(), 1);
  int64_t x = 3;
  EXPECT_OK(comm.AllReduce(&x, 1, ElementType::kInt64, ReduceOp::kSum));
  EXPECT_EQ(x, 3);
}

TEST(FakeCommunicatorTest, TheAbortHookRunsInsideAbort) {
  auto group = FakeCommunicator::Group(1);
  FakeCommunicator& comm = *group[0];
  absl::Notification release;
  comm.set_on_abort([&] { release.WaitForNotification(); });
  absl::Notification returned;
  std::thread aborter([&] {
    EXPECT_TRUE(comm.Abort());
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  release.Notify();
  aborter.join();
  EXPECT_EQ(comm.aborts(), 1);
  float x = 0;
  EXPECT_THAT(comm.AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(comm.Synchronize(), StatusIs(absl::StatusCode::kAborted));
}

TEST(FakeCommunicatorTest, TheLatencyDelaysEveryCollective) {
  auto group = FakeCommunicator::Group(1);
  group[0]->set_latency(absl::Milliseconds(30));
  float x = 0;
  const absl::Time start = absl::Now();
  ASSERT_OK(group[0]->AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kSum));
  ASSERT_OK(group[0]->Broadcast(&x, sizeof(x), 0));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(60));
}

TEST(FakeCommunicatorTest, FailNextFailsOnlyTheNextCollective) {
  auto group = FakeCommunicator::Group(1);
  group[0]->fail_next(absl::UnavailableError("peer gone"));
  float x = 2;
  EXPECT_EQ(group[0]->AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kAverage),
            absl::UnavailableError("peer gone"));
  EXPECT_OK(group[0]->AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kAverage));
  EXPECT_EQ(x, 2);
}

TEST(ElementArithmeticTest, HalfAndBFloat16RoundToNearestEven) {
  uint16_t bits = 0;
  StoreElement(ElementType::kFloat16, 1.0, &bits);
  EXPECT_EQ(bits, 0x3c00);
  StoreElement(ElementType::kFloat16, 65504.0, &bits);
  EXPECT_EQ(bits, 0x7bff);
  StoreElement(ElementType::kFloat16, 1e6, &bits);
  EXPECT_EQ(bits, 0x7c00);  // overflows to infinity
  StoreElement(ElementType::kFloat16, -2.0, &bits);
  EXPECT_EQ(bits, 0xc000);
  StoreElement(ElementType::kFloat16, 1.0 + 1.0 / 2048, &bits);  // halfway: to even
  EXPECT_EQ(bits, 0x3c00);
  StoreElement(ElementType::kFloat16, 1.0 + 3.0 / 2048, &bits);  // halfway: to even (up)
  EXPECT_EQ(bits, 0x3c02);
  StoreElement(ElementType::kFloat16, 0x1p-24, &bits);  // the smallest subnormal
  EXPECT_EQ(bits, 0x0001);
  EXPECT_EQ(LoadElement(ElementType::kFloat16, &bits), 0x1p-24);
  bits = 0x3555;
  EXPECT_NEAR(LoadElement(ElementType::kFloat16, &bits), 1.0 / 3, 1e-4);
  StoreElement(ElementType::kBFloat16, 1.0, &bits);
  EXPECT_EQ(bits, 0x3f80);
  StoreElement(ElementType::kBFloat16, 1.0 + 1.0 / 256, &bits);  // halfway: to even
  EXPECT_EQ(bits, 0x3f80);
  StoreElement(ElementType::kBFloat16, 1.0 + 3.0 / 256, &bits);
  EXPECT_EQ(bits, 0x3f82);
  EXPECT_EQ(LoadElement(ElementType::kBFloat16, &bits), 1.0 + 2.0 / 128);
}

}  // namespace
}  // namespace stoker::trainer
