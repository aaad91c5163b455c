// The CUDA kernels behind layer_norm.h: layer norm over the last dimension, with the residual
// add before it and the autocast cast after it in the same pass, forward and backward.
// `rows` rows of `width` contiguous values; per-column weight and bias fp32; the statistics
// and all arithmetic fp32. The input is fp32, fp16 or bf16; the output fp32 or, where the
// readers cast it (Note [Layer norm with its add and cast]), fp16 or bf16. Every function
// enqueues on `stream`, takes device pointers and returns the first launch error
// (cudaErrorInvalidValue for a pair of element types it does not take).
#ifndef STOKER_TRAINER_NN_LAYER_NORM_KERNELS_H_
#define STOKER_TRAINER_NN_LAYER_NORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/element_type.h"

namespace stoker::trainer {

struct NormRows {
  int64_t rows = 0;
  int width = 0;
};

// The element types of a layer norm's input (`x`) and output (`y`): x fp32 with y fp32, bf16
// or fp16; x bf16 with y bf16 or fp32; x fp16 with y fp16 or fp32.
struct NormTypes {
  ElementType x = ElementType::kFloat32;
  ElementType y = ElementType::kBFloat16;
};

// y = layer_norm(in) * weight + bias in types.y, and per row the mean and rstd = 1 / sqrt(biased
// variance + eps) for backward. Without a branch (null), `in` is `x` and `sum` is not written;
// with one (x fp32, branch in types.y), in = sum = x + branch, written as fp32 to `sum`.
cudaError_t LaunchLayerNormForward(const void* x, const void* branch, float* sum, void* y,
                                   NormTypes types, const float* weight, const float* bias,
                                   float eps, NormRows shape, float* mean, float* rstd,
                                   cudaStream_t stream);

// From dy (types.y) and the saved input `x` (types.x; the sum where there was a branch), mean
// and rstd: dx = layer_norm's input gradient (+ dx_in, fp32, the gradient of the sum from its
// other readers, where not null: x fp32 only), written in types.x to `dx` and, where `dbranch`
// is not null (x fp32), in types.y to `dbranch` (the branch's gradient).
cudaError_t LaunchLayerNormBackward(const void* dy, const void* x, NormTypes types,
                                    const float* mean, const float* rstd, const float* weight,
                                    const float* dx_in, NormRows shape, void* dx, void* dbranch,
                                    cudaStream_t stream);

// The fp32 scratch LaunchLayerNormParameterGradients needs: per chunk of rows, partial sums.
int64_t LayerNormScratchFloats(NormRows shape);

// Per column: partial sums of dy * normalised and of dy over chunks of rows, into `scratch`
// as [chunks][2][width]; the caller sums the chunks (LayerNormChunks(shape) of them), in
// fixed order (deterministic).
cudaError_t LaunchLayerNormParameterGradients(const void* dy, const void* x, NormTypes types,
                                              const float* mean, const float* rstd, NormRows shape,
                                              float* scratch, cudaStream_t stream);
int64_t LayerNormChunks(NormRows shape);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_LAYER_NORM_KERNELS_H_
