// The CUDA kernels behind the fused batch norm of fused_blocks.h: batch norm with its
// residual add and ReLU, forward and backward (max pooling: max_pool_kernels.h).
// Activations are NHWC in memory (a channels_last [N, C, H, W] tensor): `rows` = N * H * W
// rows of `channels` contiguous values, of one floating ElementType (common/element_type.h:
// kFloat32, kFloat16 or kBFloat16; the others are refused with cudaErrorInvalidValue).
// Per-channel arrays (weight, bias, statistics) are fp32. Every function
// enqueues on `stream`, takes device pointers and returns the first launch error.
#ifndef STOKER_TRAINER_NN_FUSED_KERNELS_H_
#define STOKER_TRAINER_NN_FUSED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/element_type.h"

namespace stoker::trainer {

struct ChannelRows {
  int64_t rows = 0;
  int channels = 0;
};

// The fp32 scratch the batch-norm launches below need on the current device (per-block
// partial reductions; the device's multiprocessor count sizes the grid).
int64_t BatchNormScratchFloats(ChannelRows shape);

// Batch statistics of x in one pass (Welford per thread, merged exactly across threads and
// blocks): mean and invstd = 1 / sqrt(biased variance + eps); the running statistics, where
// given, move towards the batch's by `momentum` (unbiased variance, as torch.nn.BatchNorm2d);
// scale = weight * invstd for LaunchBatchNormApply. Precondition: shape.rows >= 2.
cudaError_t LaunchBatchNormStatistics(const void* x, ElementType type, ChannelRows shape, float eps,
                                      float momentum, const float* weight, float* running_mean,
                                      float* running_var, float* mean, float* invstd, float* scale,
                                      float* scratch, cudaStream_t stream);

// The same outputs from fixed (running) statistics, for evaluation.
cudaError_t LaunchBatchNormFixedStatistics(const float* running_mean, const float* running_var,
                                           float eps, const float* weight, int channels,
                                           float* mean, float* invstd, float* scale,
                                           cudaStream_t stream);

// y = act((x - mean[c]) * scale[c] + bias[c] (+ residual)), act = ReLU or identity;
// `residual` may be null. Centring before scaling keeps y's rounding error relative to y
// (not to x's mean), as the composition's is. One pass: reads x (and residual) once, writes
// y once.
cudaError_t LaunchBatchNormApply(const void* x, const void* residual, void* y, ElementType type,
                                 ChannelRows shape, const float* mean, const float* scale,
                                 const float* bias, bool relu, cudaStream_t stream);

// Gradients of y = act(x * weight * invstd + (bias - mean * weight * invstd) (+ residual)).
// g = dy * (y > 0) with ReLU (y is the forward's output), dy otherwise; residual_grad (may be
// null) receives g. weight_grad = sum(g * (x - mean) * invstd), bias_grad = sum(g) (either may
// be null). With batch_statistics, x_grad includes the path through mean and variance
// (training); without, the statistics are constants (evaluation). Two passes over the
// activation: one reduces (and writes residual_grad), one writes x_grad.
cudaError_t LaunchBatchNormBackward(const void* dy, const void* y, const void* x, ElementType type,
                                    ChannelRows shape, const float* mean, const float* invstd,
                                    const float* weight, bool relu, bool batch_statistics,
                                    void* x_grad, void* residual_grad, float* weight_grad,
                                    float* bias_grad, float* scratch, cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_FUSED_KERNELS_H_
