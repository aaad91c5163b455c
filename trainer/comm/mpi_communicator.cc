#include "trainer/comm/mpi_communicator.h"

#include <climits>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/mpi_status.h"
#include "common/status_macros.h"

namespace stoker::trainer {

// Note [Ledger of a failed call]
// A collective that returned an error is not waiting any more: the ledger counts it as
// completed, so that the watchdog does not report it as stuck while the training thread
// fails the usual way.

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(MPI_Comm parent) {
  MPI_Comm comm;
  RETURN_IF_MPI_ERROR(MPI_Comm_dup(parent, &comm));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(comm, &rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(comm, &size));
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, rank, size));
}

MpiCommunicator::~MpiCommunicator() { MPI_Comm_free(&comm_); }

absl::Status MpiCommunicator::AllReduce(void* data, size_t count, ElementType type, ReduceOp op) {
  MPI_Datatype mpi_type;
  switch (type) {
    case ElementType::kFloat32:
      mpi_type = MPI_FLOAT;
      break;
    case ElementType::kInt64:
      mpi_type = MPI_INT64_T;
      break;
    default:
      return absl::UnimplementedError(
          "MpiCommunicator sums float32 and int64 only; half-precision gradients need NCCL");
  }
  // MPI counts are int: reduce in chunks so that buffers of any size work.
  // Failed or not, the operation is over when this returns (Note [Ledger of a failed call]).
  const uint64_t seq = ledger_.Issue(CollectiveKind::kAllReduce);
  absl::Cleanup complete = [this, seq] { ledger_.Complete(seq); };
  const size_t total = count;
  char* bytes = static_cast<char*>(data);
  const size_t element = ElementSize(type);
  while (count > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(count, INT_MAX / 2));
    RETURN_IF_MPI_ERROR(MPI_Allreduce(MPI_IN_PLACE, bytes, chunk, mpi_type, MPI_SUM, comm_));
    bytes += chunk * element;
    count -= chunk;
  }
  if (op == ReduceOp::kAverage && world_size_ > 1) {
    if (type != ElementType::kFloat32) {
      return absl::InvalidArgumentError("MpiCommunicator averages float32 only");
    }
    float* values = static_cast<float*>(data);
    const float scale = 1.0f / world_size_;
    for (size_t i = 0; i < total; ++i) values[i] *= scale;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  const uint64_t seq = ledger_.Issue(CollectiveKind::kBroadcast);
  absl::Cleanup complete = [this, seq] { ledger_.Complete(seq); };
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(bytes, INT_MAX / 2));
    RETURN_IF_MPI_ERROR(MPI_Bcast(p, chunk, MPI_BYTE, root, comm_));
    p += chunk;
    bytes -= chunk;
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
