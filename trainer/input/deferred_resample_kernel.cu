#include "trainer/input/deferred_resample_kernel.h"

namespace stoker::trainer {
namespace {

// One thread per output pixel; blockIdx.y is the job.
__global__ void DeferredResampleKernel(const ResampleJob* jobs, int out_size) {
  const ResampleJob& job = jobs[blockIdx.y];
  const int pixel = blockIdx.x * blockDim.x + threadIdx.x;
  if (pixel >= out_size * out_size) return;
  const int oy = pixel / out_size;
  const int ox = pixel % out_size;
  const int out_x = job.flip ? out_size - 1 - ox : ox;
  ResamplePixel(job, ox, oy, job.dst + (static_cast<int64_t>(oy) * out_size + out_x) * 3);
}

}  // namespace

cudaError_t LaunchDeferredResample(const ResampleJob* jobs, int count, int out_size,
                                   cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int pixels = out_size * out_size;
  const dim3 grid((pixels + kThreads - 1) / kThreads, count);
  DeferredResampleKernel<<<grid, kThreads, 0, stream>>>(jobs, out_size);
  return cudaGetLastError();
}

}  // namespace stoker::trainer
