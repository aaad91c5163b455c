// The number of hardware work queues a CUDA context spreads its streams over.
//
// Note [Hardware work queues]
// A GPU takes work from a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS: 8 by default, at
// most 32), and CUDA maps streams onto them round-robin. Two streams that share a queue run
// in the order their work was queued, as one stream would. nvJPEG's hardware decoder
// launches its kernels on streams of its own; when one of them shared a queue with the
// compute stream, a batch's decode waited behind every step already queued there. Measured
// on an H200: a batch of 64 JPEGs decoded in 2.1 ms on an idle GPU, in 102 ms beside 100 ms
// of matrix products queued on another stream with 8 queues, and in 6.4 ms with 32
// (GpuJpegDecoderTest.DecodeTimeBesideOtherWork). So a trainer asks for all 32, unless the
// environment already sets the variable (that value is kept). CUDA reads it when it makes
// the context: call this before any CUDA call.
#ifndef STOKER_COMMON_CUDA_WORK_QUEUES_H_
#define STOKER_COMMON_CUDA_WORK_QUEUES_H_

#include <string>

namespace stoker {

inline constexpr int kCudaWorkQueues = 32;

// Sets CUDA_DEVICE_MAX_CONNECTIONS to kCudaWorkQueues in this process's environment unless
// it is set already; returns the value in effect. Not thread-safe (setenv): call it at the
// start of main, or from a static initializer.
std::string UseAllCudaWorkQueues();

}  // namespace stoker

#endif  // STOKER_COMMON_CUDA_WORK_QUEUES_H_
