// MpiCommunicator passes the Communicator conformance suite (3 ranks under mpirun).
#include <mpi.h>

#include "gtest/gtest.h"
#include "trainer/comm/communicator_conformance.h"
#include "trainer/comm/mpi_communicator.h"

namespace stoker::trainer {
namespace {

// This process's rank of MPI_COMM_WORLD, over host memory.
class MpiTarget final : public HostMemoryConformanceTarget {
 public:
  void RunOnEveryRank(const std::function<void(Communicator&)>& body) override {
    auto comm = MpiCommunicator::Create(MPI_COMM_WORLD);
    ASSERT_TRUE(comm.ok()) << comm.status();
    body(**comm);
  }
  // MPI sums float32 and int64 and averages float32 (half precision is NCCL's).
  bool Supports(ElementType type, ReduceOp op) const override {
    return type == ElementType::kFloat32 || (type == ElementType::kInt64 && op == ReduceOp::kSum);
  }
  bool can_abort() const override { return false; }  // a blocked MPI call cannot be interrupted
};

INSTANTIATE_TEST_SUITE_P(
    Mpi, CommunicatorConformanceTest,
    (::stoker::testing::OnlyTarget<CommunicatorConformanceTarget, MpiTarget>("World")),
    CommunicatorConformanceParamName);

}  // namespace
}  // namespace stoker::trainer
