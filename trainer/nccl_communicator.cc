#include "trainer/nccl_communicator.h"

#include <c10/cuda/CUDAStream.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/mpi_status.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return ncclFloat32;
    case ElementType::kFloat16:
      return ncclFloat16;
    case ElementType::kBFloat16:
      return ncclBfloat16;
    case ElementType::kInt64:
      return ncclInt64;
    case ElementType::kUInt8:
      return ncclUint8;
  }
  return absl::InvalidArgumentError("unknown element type");
}

}  // namespace

// Note [Comm stream]
// Gradients are produced on the compute stream while backward runs. Reducing them on a
// separate stream lets NCCL's kernels run beside backward's; the inbound event orders
// each reduction after the gradients it reads, and the outbound event orders the
// optimizer (on the compute stream) after the last reduction. The stream has the highest
// priority so that a ready bucket is not queued behind backward's kernels.

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(MPI_Comm bootstrap,
                                                                           int device) {
  int rank = 0, size = 0;
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(bootstrap, &rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(bootstrap, &size));
  ncclUniqueId id;
  if (rank == 0) RETURN_IF_NCCL_ERROR(ncclGetUniqueId(&id));
  RETURN_IF_MPI_ERROR(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap));

  RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  int least = 0, greatest = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t stream;
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
  absl::Cleanup destroy_stream = [stream] { cudaStreamDestroy(stream); };
  cudaEvent_t inbound, outbound;
  RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&inbound, cudaEventDisableTiming));
  absl::Cleanup destroy_inbound = [inbound] { cudaEventDestroy(inbound); };
  RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&outbound, cudaEventDisableTiming));
  absl::Cleanup destroy_outbound = [outbound] { cudaEventDestroy(outbound); };

  ncclComm_t comm;
  RETURN_IF_NCCL_ERROR(ncclCommInitRank(&comm, size, id, rank));
  std::move(destroy_stream).Cancel();
  std::move(destroy_inbound).Cancel();
  std::move(destroy_outbound).Cancel();
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, stream, inbound, outbound, rank, size));
}

NcclCommunicator::~NcclCommunicator() {
  if (failed_) {
    ncclCommAbort(comm_);
  } else {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
  }
  cudaEventDestroy(outbound_);
  cudaEventDestroy(inbound_);
  cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::WaitForCurrentStream() {
  cudaStream_t current = c10::cuda::getCurrentCUDAStream().stream();
  RETURN_IF_CUDA_ERROR(cudaEventRecord(inbound_, current));
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(stream_, inbound_, 0));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduce(void* data, size_t count, ElementType type, ReduceOp op) {
  ASSIGN_OR_RETURN(ncclDataType_t nccl_type, NcclType(type));
  RETURN_IF_ERROR(WaitForCurrentStream());
  absl::Status status = NcclStatus(
      ncclAllReduce(data, data, count, nccl_type, op == ReduceOp::kAverage ? ncclAvg : ncclSum,
                    comm_, stream_),
      "ncclAllReduce");
  failed_ |= !status.ok();
  return status;
}

absl::Status NcclCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  RETURN_IF_ERROR(WaitForCurrentStream());
  absl::Status status =
      NcclStatus(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
  failed_ |= !status.ok();
  if (!status.ok()) return status;
  return Synchronize();
}

absl::Status NcclCommunicator::Synchronize() {
  cudaStream_t current = c10::cuda::getCurrentCUDAStream().stream();
  RETURN_IF_CUDA_ERROR(cudaEventRecord(outbound_, stream_));
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(current, outbound_, 0));
  return absl::OkStatus();
}

}  // namespace stoker::trainer
