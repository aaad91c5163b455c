// The CUDA kernels behind layer_norm.h: layer norm over the last dimension of fp32 rows,
// with the residual add before it and the cast to bf16 after it in the same pass, forward
// and backward. `rows` rows of `width` contiguous values; per-column weight and bias fp32.
// Every function enqueues on `stream`, takes device pointers and returns the first launch
// error.
#ifndef STOKER_TRAINER_NN_LAYER_NORM_KERNELS_H_
#define STOKER_TRAINER_NN_LAYER_NORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace stoker::trainer {

struct NormRows {
  int64_t rows = 0;
  int width = 0;
};

// sum = residual + branch (fp32 + bf16, written as fp32; `branch` null: sum is `residual`
// itself and is not written), y = bf16(layer_norm(sum) * weight + bias), and per row the
// mean and rstd = 1 / sqrt(biased variance + eps) for backward.
cudaError_t LaunchLayerNormForward(const float* residual, const void* branch, float* sum, void* y,
                                   const float* weight, const float* bias, float eps,
                                   NormRows shape, float* mean, float* rstd, cudaStream_t stream);

// From dy (bf16) and the saved sum, mean and rstd: dsum = layer_norm's input gradient
// (+ dsum_in, the gradient of `sum` from its other readers, where not null), written as fp32
// to `dsum` and, where `dbranch` is not null, as bf16 to `dbranch` (the branch's gradient).
cudaError_t LaunchLayerNormBackward(const void* dy, const float* sum, const float* mean,
                                    const float* rstd, const float* weight, const float* dsum_in,
                                    NormRows shape, float* dsum, void* dbranch,
                                    cudaStream_t stream);

// The fp32 scratch LaunchLayerNormParameterGradients needs: per chunk of rows, partial sums.
int64_t LayerNormScratchFloats(NormRows shape);

// Per column: partial sums of dy * normalised and of dy over chunks of rows, into `scratch`
// as [chunks][2][width]; the caller sums the chunks (LayerNormChunks(shape) of them).
cudaError_t LaunchLayerNormParameterGradients(const void* dy, const float* sum, const float* mean,
                                              const float* rstd, NormRows shape, float* scratch,
                                              cudaStream_t stream);
int64_t LayerNormChunks(NormRows shape);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_LAYER_NORM_KERNELS_H_
