// CudaStream and CudaEvent: move-only owners of a CUDA stream and a CUDA event. Each is
// made by a factory that returns StatusOr and destroyed by its destructor, which never
// throws. A default-constructed owner holds nothing (get() is nullptr).
//
//   ASSIGN_OR_RETURN(CudaStream copy, CudaStream::Create(device));
//   ASSIGN_OR_RETURN(CudaEvent copied, CudaEvent::Create());
//   ... cudaMemcpyAsync(..., copy.get()) ...
//   RETURN_IF_ERROR(copied.Record(copy.get()));
//   RETURN_IF_ERROR(copied.Synchronize());
#ifndef STOKER_COMMON_CUDA_STREAM_H_
#define STOKER_COMMON_CUDA_STREAM_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker {

// Owns one stream of one device. Thread-compatible; the stream itself may be used from
// any thread.
class CudaStream {
 public:
  // A stream of `device` (the calling thread's current device is left as it was) with
  // cudaStreamCreateWithPriority's `flags` and `priority` (lower numbers run first; see
  // cudaDeviceGetStreamPriorityRange).
  static absl::StatusOr<CudaStream> Create(int device, unsigned flags = cudaStreamNonBlocking,
                                           int priority = 0);

  CudaStream() = default;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  // Destroys the stream; work already enqueued on it still completes (CUDA's semantics).
  ~CudaStream();

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

  // Blocks the host until the work enqueued so far has completed.
  absl::Status Synchronize() const;

 private:
  CudaStream(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  void Reset();

  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

// Owns one event, of the device current when it was created. Thread-compatible.
class CudaEvent {
 public:
  // cudaEventCreateWithFlags on the calling thread's current device. Pass
  // cudaEventDefault for an event that ElapsedMs can time.
  static absl::StatusOr<CudaEvent> Create(unsigned flags = cudaEventDisableTiming);

  CudaEvent() = default;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }

  // Captures the work enqueued on `stream` so far (cudaEventRecord).
  absl::Status Record(cudaStream_t stream);
  // Blocks the host until the captured work has completed.
  absl::Status Synchronize() const;
  // True once the captured work has completed, false while it runs.
  absl::StatusOr<bool> Query() const;
  // Milliseconds from `start` to this event; both must have completed and be timing
  // events (created without cudaEventDisableTiming).
  absl::StatusOr<float> ElapsedMs(const CudaEvent& start) const;

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  void Reset();

  cudaEvent_t event_ = nullptr;
};

}  // namespace stoker

#endif  // STOKER_COMMON_CUDA_STREAM_H_
