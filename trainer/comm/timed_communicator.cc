#include "trainer/comm/timed_communicator.h"

#include <chrono>

namespace stoker::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::Status TimedCommunicator::AllReduce(void* data, size_t count, ElementType type, ReduceOp op) {
  const Clock::time_point start = Clock::now();
  absl::Status status = inner_->AllReduce(data, count, type, op);
  seconds_ += Since(start);
  return status;
}

absl::Status TimedCommunicator::Broadcast(void* data, size_t bytes, int root) {
  const Clock::time_point start = Clock::now();
  absl::Status status = inner_->Broadcast(data, bytes, root);
  seconds_ += Since(start);
  return status;
}

absl::Status TimedCommunicator::Synchronize() {
  const Clock::time_point start = Clock::now();
  absl::Status status = inner_->Synchronize();
  seconds_ += Since(start);
  return status;
}

}  // namespace stoker::trainer
