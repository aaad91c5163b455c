#include "trainer/comm/timed_communicator.h"

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "trainer/comm/fake_communicator.h"

namespace stoker::trainer {
namespace {

TEST(TimedCommunicatorTest, AddsTheTimeSpentInCalls) {
  std::vector<std::unique_ptr<FakeCommunicator>> slow = FakeCommunicator::Group(1);
  slow[0]->set_latency(absl::Milliseconds(10));
  TimedCommunicator timed(slow[0].get());
  float x = 0;
  ASSERT_TRUE(timed.AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_TRUE(timed.AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_GE(timed.seconds(), 0.019);
  timed.reset();
  EXPECT_EQ(timed.seconds(), 0);
}

}  // namespace
}  // namespace stoker::trainer
