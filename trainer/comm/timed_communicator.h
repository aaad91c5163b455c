// TimedCommunicator: a Communicator that counts the host time spent in its calls, so that
// the step profiler (--profile_steps) can move the time of the gradient allreduces that run
// inside backward's hooks on the CPU from backward to the allreduce wait.
#ifndef STOKER_TRAINER_COMM_TIMED_COMMUNICATOR_H_
#define STOKER_TRAINER_COMM_TIMED_COMMUNICATOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Passes every call on to `inner` and adds the seconds spent in it (host time; meaningful
// for host communicators such as MPI, whose calls return when done). Used by the thread
// that makes the calls, like the communicator it wraps; `inner` outlives it.
class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator* inner) : inner_(inner) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Synchronize() override;
  double seconds() const { return seconds_; }
  void reset() { seconds_ = 0; }

 private:
  Communicator* inner_;
  double seconds_ = 0;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_TIMED_COMMUNICATOR_H_
