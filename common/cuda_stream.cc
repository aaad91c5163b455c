#include "common/cuda_stream.h"

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"

namespace stoker {

absl::StatusOr<CudaStream> CudaStream::Create(int device, unsigned flags, int priority) {
  int previous = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&previous));
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  absl::Cleanup restore = [previous] { cudaSetDevice(previous); };
  cudaStream_t stream = nullptr;
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithPriority(&stream, flags, priority));
  return CudaStream(stream, device);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(std::exchange(other.device_, -1)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

CudaStream::~CudaStream() { Reset(); }

void CudaStream::Reset() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  device_ = -1;
}

absl::Status CudaStream::Synchronize() const {
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::StatusOr<CudaEvent> CudaEvent::Create(unsigned flags) {
  cudaEvent_t event = nullptr;
  RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&event, flags));
  return CudaEvent(event);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() { Reset(); }

void CudaEvent::Reset() {
  if (event_ != nullptr) cudaEventDestroy(event_);
  event_ = nullptr;
}

absl::Status CudaEvent::Record(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(event_, stream), "cudaEventRecord");
}

absl::Status CudaEvent::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

absl::StatusOr<bool> CudaEvent::Query() const {
  const cudaError_t state = cudaEventQuery(event_);
  if (state == cudaErrorNotReady) return false;
  RETURN_IF_ERROR(CudaStatus(state, "cudaEventQuery"));
  return true;
}

absl::StatusOr<float> CudaEvent::ElapsedMs(const CudaEvent& start) const {
  float ms = 0;
  RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace stoker
