// The CUDA kernels behind the fused max pooling of fused_blocks.h: max pooling that keeps a
// one-byte argmax per output instead of an int64 index. Tensors are NHWC in memory (a
// channels_last [N, C, H, W] tensor) of one ElementType (fused_kernels.h). Every function
// enqueues on `stream`, takes device pointers and returns the first launch error.
#ifndef STOKER_TRAINER_NN_MAX_POOL_KERNELS_H_
#define STOKER_TRAINER_NN_MAX_POOL_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "trainer/nn/fused_kernels.h"

namespace stoker::trainer {

// A max-pooling geometry on NHWC tensors (dilation 1, floor mode); kernel * kernel <= 255.
struct PoolGeometry {
  int64_t batch = 0;
  int height = 0, width = 0, channels = 0;
  int out_height = 0, out_width = 0;
  int kernel = 0, stride = 0, padding = 0;
};

// y = the maximum of each window, as torch.max_pool2d picks it (the first maximum in window
// order, NaN wins); argmax[i] = kh * kernel + kw of the chosen element.
cudaError_t LaunchMaxPoolForward(const void* x, ElementType type, const PoolGeometry& g, void* y,
                                 uint8_t* argmax, cudaStream_t stream);

// dx = the sum of dy over the windows whose argmax is that element; every element of dx is
// written (no zero-fill pass, no atomics: the sum's order is fixed).
cudaError_t LaunchMaxPoolBackward(const void* dy, const uint8_t* argmax, ElementType type,
                                  const PoolGeometry& g, void* dx, cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_MAX_POOL_KERNELS_H_
