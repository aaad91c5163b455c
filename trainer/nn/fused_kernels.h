// The CUDA kernels behind the fused blocks (fused_blocks.h): batch norm with its residual
// add and ReLU, forward and backward, and max pooling that keeps a one-byte argmax per
// output instead of an int64 index. Activations are NHWC in memory (a channels_last
// [N, C, H, W] tensor): `rows` = N * H * W rows of `channels` contiguous values, of one
// ElementType. Per-channel arrays (weight, bias, statistics) are fp32. Every function
// enqueues on `stream`, takes device pointers and returns the first launch error.
#ifndef STOKER_TRAINER_NN_FUSED_KERNELS_H_
#define STOKER_TRAINER_NN_FUSED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace stoker::trainer {

enum class ElementType { kFloat32, kFloat16, kBFloat16 };

struct ChannelRows {
  int64_t rows = 0;
  int channels = 0;
};

// The fp32 scratch the batch-norm launches below need (per-block partial reductions).
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

#endif  // STOKER_TRAINER_NN_FUSED_KERNELS_H_
