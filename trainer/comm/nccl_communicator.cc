#include "trainer/comm/nccl_communicator.h"

#include <c10/cuda/CUDAStream.h>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/cuda_stream.h"
#include "common/logging.h"
#include "common/mpi_status.h"
#include "common/status_macros.h"
#include "launcher/rank/phase_deadline.h"
#include "trainer/comm/device_timeline.h"

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

// Note [NCCL completion events]
// NCCL operations return once enqueued; the host learns that one finished only from the
// stream. After each operation an event is recorded on the communicator's stream, and
// PollCompletions() (the watchdog's thread) completes in the ledger every operation whose
// event has passed, so that a collective stuck on the device is seen as stuck even though
// no host call is waiting in it. The events are reused.

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    MPI_Comm bootstrap, int device, absl::Duration deadline) {
  int rank = 0, size = 0;
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(bootstrap, &rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(bootstrap, &size));
  ncclUniqueId id;
  if (rank == 0) RETURN_IF_NCCL_ERROR(ncclGetUniqueId(&id));
  // Note [Start-up and teardown deadlines] in launcher/rank/phase_deadline.h.
  RETURN_IF_ERROR(launcher::AwaitPhase(bootstrap, "NCCL id broadcast", deadline));
  {
    launcher::PhaseDeadline bounded("the NCCL id broadcast (MPI_Bcast)", deadline);
    RETURN_IF_MPI_ERROR(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap));
  }

  RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  int least = 0, greatest = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device, cudaStreamNonBlocking, greatest));
  ASSIGN_OR_RETURN(CudaEvent inbound, CudaEvent::Create(cudaEventDisableTiming));
  ASSIGN_OR_RETURN(CudaEvent outbound, CudaEvent::Create(cudaEventDisableTiming));

  ncclComm_t comm;
  {
    launcher::PhaseDeadline bounded("ncclCommInitRank", deadline);
    RETURN_IF_NCCL_ERROR(ncclCommInitRank(&comm, size, id, rank));
  }
  auto communicator = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(
      std::move(stream), std::move(inbound), std::move(outbound), comm, device, rank, size));
  communicator->teardown_timeout_ = deadline;
  return communicator;
}

NcclCommunicator::~NcclCommunicator() {
  if (aborted_.exchange(true)) {
    // The watchdog aborted the communicator already.
  } else if (failed_) {
    ncclCommAbort(comm_);
  } else {
    // Note [Start-up and teardown deadlines]: neither call can be interrupted.
    launcher::PhaseDeadline bounded(
        absl::StrCat("teardown of the NCCL communicator of rank ", rank_,
                     " (cudaStreamSynchronize, ncclCommDestroy)"),
        teardown_timeout_);
    if (const cudaError_t synced = cudaStreamSynchronize(stream_.get()); synced != cudaSuccess) {
      LogWarning("rank %d: teardown of the NCCL communicator: cudaStreamSynchronize: %s", rank_,
                 cudaGetErrorString(synced));
    }
    if (const ncclResult_t destroyed = ncclCommDestroy(comm_); destroyed != ncclSuccess) {
      LogWarning("rank %d: teardown of the NCCL communicator: ncclCommDestroy: %s (%s)", rank_,
                 ncclGetErrorString(destroyed), ncclGetLastError(nullptr));
    }
  }
  absl::MutexLock lock(&events_mu_);
  in_flight_.clear();
  free_events_.clear();
  // Then the members: outbound_, inbound_ and last stream_.
}

absl::Status NcclCommunicator::WaitForCurrentStream() {
  cudaStream_t current = c10::cuda::getCurrentCUDAStream().stream();
  RETURN_IF_CUDA_ERROR(cudaEventRecord(inbound_.get(), current));
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(stream_.get(), inbound_.get(), 0));
  return absl::OkStatus();
}

void NcclCommunicator::TrackCompletion(uint64_t seq, const absl::Status& enqueued,
                                       cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &capturing);
  if (!enqueued.ok() || capturing != cudaStreamCaptureStatusNone) {
    // Failed: not waiting in it, the caller fails. Captured: nothing runs until a replay.
    ledger_.Complete(seq);
    return;
  }
  absl::MutexLock lock(&events_mu_);
  // Completions seen now keep the ledger (and the node's progress table) current even if
  // this rank stops before the watchdog's next poll.
  while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().second.get()) == cudaSuccess) {
    ledger_.Complete(in_flight_.front().first);
    free_events_.push_back(std::move(in_flight_.front().second));
    in_flight_.pop_front();
  }
  CudaEvent event;
  if (!free_events_.empty()) {
    event = std::move(free_events_.back());
    free_events_.pop_back();
  } else if (absl::StatusOr<CudaEvent> created = CudaEvent::Create(cudaEventDisableTiming);
             created.ok()) {
    event = std::move(*created);
  } else {
    return;  // not tracked: completed with the next tracked operation
  }
  if (cudaEventRecord(event.get(), stream) != cudaSuccess) {
    free_events_.push_back(std::move(event));
    return;
  }
  in_flight_.emplace_back(seq, std::move(event));
}

absl::Status NcclCommunicator::PollCompletions() {
  absl::MutexLock lock(&events_mu_);
  if (aborted_.load()) return absl::OkStatus();
  if (!in_flight_.empty()) RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
  while (!in_flight_.empty()) {
    const cudaError_t state = cudaEventQuery(in_flight_.front().second.get());
    if (state == cudaErrorNotReady) break;
    RETURN_IF_ERROR(CudaStatus(state, "cudaEventQuery (NCCL completion)"));
    ledger_.Complete(in_flight_.front().first);
    free_events_.push_back(std::move(in_flight_.front().second));
    in_flight_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::WatchCurrentStream() {
  absl::MutexLock lock(&comm_mu_);
  if (aborted_.load())
    return absl::AbortedError("the NCCL communicator was aborted (collective watchdog)");
  const uint64_t seq = ledger_.Issue(CollectiveKind::kAllReduce);
  TrackCompletion(seq, absl::OkStatus(), c10::cuda::getCurrentCUDAStream().stream());
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AsyncError() {
  if (aborted_.load()) return absl::OkStatus();
  ncclResult_t async = ncclSuccess;
  const ncclResult_t queried = ncclCommGetAsyncError(comm_, &async);
  if (queried != ncclSuccess) return NcclStatus(queried, "ncclCommGetAsyncError");
  if (async == ncclSuccess || async == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("NCCL reports an asynchronous error on the communicator of ", world_size_,
                   " ranks: ", ncclGetErrorString(async), " (", ncclGetLastError(comm_),
                   "): a peer rank or the network failed"));
}

bool NcclCommunicator::Abort() {
  absl::MutexLock lock(&comm_mu_);
  if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  return true;
}

absl::Status NcclCommunicator::AllReduce(void* data, size_t count, ElementType type, ReduceOp op) {
  ASSIGN_OR_RETURN(ncclDataType_t nccl_type, NcclType(type));
  RETURN_IF_ERROR(WaitForCurrentStream());
  absl::MutexLock lock(&comm_mu_);
  if (aborted_.load())
    return absl::AbortedError("the NCCL communicator was aborted (collective watchdog)");
  const uint64_t seq = ledger_.Issue(CollectiveKind::kAllReduce);
  // After the wait for the current stream: the interval starts when the reduction can.
  const int timed = timeline_ != nullptr ? timeline_->Started(stream_.get()) : -1;
  absl::Status status =
      NcclStatus(ncclAllReduce(data, data, count, nccl_type,
                               op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm_, stream_.get()),
                 "ncclAllReduce");
  if (timeline_ != nullptr) timeline_->Done(timed, stream_.get());
  failed_ |= !status.ok();
  TrackCompletion(seq, status, stream_.get());
  return status;
}

absl::Status NcclCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  RETURN_IF_ERROR(WaitForCurrentStream());
  {
    absl::MutexLock lock(&comm_mu_);
    if (aborted_.load())
      return absl::AbortedError("the NCCL communicator was aborted (collective watchdog)");
    const uint64_t seq = ledger_.Issue(CollectiveKind::kBroadcast);
    absl::Status status = NcclStatus(
        ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_.get()), "ncclBroadcast");
    failed_ |= !status.ok();
    TrackCompletion(seq, status, stream_.get());
    if (!status.ok()) return status;
  }
  return Synchronize();
}

absl::Status NcclCommunicator::Synchronize() {
  cudaStream_t current = c10::cuda::getCurrentCUDAStream().stream();
  RETURN_IF_CUDA_ERROR(cudaEventRecord(outbound_.get(), stream_.get()));
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(current, outbound_.get(), 0));
  return absl::OkStatus();
}

}  // namespace stoker::trainer
