// The conformance suite of the Communicator interface (trainer/comm/communicator.h): one
// set of tests that every implementation passes, run against the fake (a group of
// threads), MPI and NCCL (a group of processes under mpirun). An implementation takes
// part through a CommunicatorConformanceTarget, which makes its groups and its buffers
// (host or device memory), and one INSTANTIATE_TEST_SUITE_P:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Mpi, CommunicatorConformanceTest,
//       ::testing::Values(CommunicatorConformanceParam{"np3", [] { return
//       std::make_unique<MpiTarget>(); }}), CommunicatorConformanceParamName);
//
// The test binary links //trainer/comm:communicator_conformance (which holds the tests).
#ifndef STOKER_TRAINER_COMM_COMMUNICATOR_CONFORMANCE_H_
#define STOKER_TRAINER_COMM_COMMUNICATOR_CONFORMANCE_H_

#include <cstddef>
#include <functional>

#include "absl/status/status.h"
#include "common/testing/conformance.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// One implementation as the suite drives it. Called from the test's thread; Allocate,
// Free, CopyIn and CopyOut also from the threads of a group of threads. MissingHardware
// ("needs 2 GPUs") gives the same answer on every rank.
class CommunicatorConformanceTarget : public ::stoker::testing::ConformanceTarget {
 public:
  // Makes a fresh group and calls `body` with each communicator of it that this process
  // runs: a group of threads calls it on one thread per rank (or on the caller's thread
  // for one rank) and returns when every call has returned; a group of processes calls it
  // once, with this process's rank, while the other processes run the same test.
  virtual void RunOnEveryRank(const std::function<void(Communicator&)>& body) = 0;

  // Whether AllReduce supports `type` with `op`; an unsupported pair must fail (on every
  // rank) without hanging.
  virtual bool Supports(ElementType type, ReduceOp op) const = 0;
  // Whether Abort() returns true and fails every later collective.
  virtual bool can_abort() const = 0;
  // Whether a rank can wait, on the host, in a collective that its peers never join,
  // until Abort() from another thread ends it.
  virtual bool can_interrupt_a_waiting_rank() const { return false; }
  // Whether FailNext works.
  virtual bool can_fail_next() const { return false; }
  // Makes the next AllReduce or Broadcast of `communicator` (one of this target's) fail
  // with `status` on its rank.
  virtual void FailNext(Communicator& communicator, const absl::Status& status) {}

  // Memory that the collectives work on (host or device memory of the calling rank).
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* buffer) = 0;
  virtual void CopyIn(void* buffer, const void* host, size_t bytes) = 0;
  // After Communicator::Synchronize(): copies the buffer's bytes to the host, ordered
  // after what Synchronize ordered, and waits for them.
  virtual void CopyOut(void* host, const void* buffer, size_t bytes) = 0;
};

// A target whose collectives work on host memory (malloc'ed): the fake's and MPI's.
class HostMemoryConformanceTarget : public CommunicatorConformanceTarget {
 public:
  void* Allocate(size_t bytes) override;
  void Free(void* buffer) override;
  void CopyIn(void* buffer, const void* host, size_t bytes) override;
  void CopyOut(void* host, const void* buffer, size_t bytes) override;
};

using CommunicatorConformanceParam =
    ::stoker::testing::ConformanceParam<CommunicatorConformanceTarget>;
using CommunicatorConformanceTest =
    ::stoker::testing::ConformanceTest<CommunicatorConformanceTarget>;
inline constexpr auto CommunicatorConformanceParamName =
    &::stoker::testing::ConformanceParamName<CommunicatorConformanceTarget>;

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_COMMUNICATOR_CONFORMANCE_H_
