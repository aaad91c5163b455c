// Communicator: the interface through which ranks sum gradients and share state. The MPI
// implementation serves the CPU path; the NCCL one (same interface) the GPU path.
#ifndef STOKER_TRAINER_COMMUNICATOR_H_
#define STOKER_TRAINER_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace stoker::trainer {

enum class ElementType { kFloat32, kFloat16, kBFloat16, kInt64, kUInt8 };

size_t ElementSize(ElementType type);

// Collective operations over a fixed group of ranks. Every method is a collective: it
// must be called in the same order on every rank. Where the buffers live (host or device)
// and on which stream work runs is the implementation's contract.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Sums `count` elements at `data` in place across all ranks; every rank gets the same
  // bits.
  virtual absl::Status AllReduceSum(void* data, size_t count, ElementType type) = 0;

  // Copies `bytes` bytes at `data` from rank `root` to every other rank.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;

  // Returns once every operation issued so far has completed.
  virtual absl::Status Synchronize() = 0;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMMUNICATOR_H_
