// The CUDA kernels around cuDNN's fused convolutions (conv_bn_graphs.h) that cuDNN does not
// provide: the batch norm's statistics finalised from the convolution's per-channel sums,
// the prologue's per-channel scale and shift, and the batch norm's data gradient from the
// fused dgrad's outputs. Activations are NHWC (ChannelRows of fused_kernels.h) of one
// ElementType (kFloat16 or kBFloat16 here; kFloat32 accepted); per-channel arrays are fp32
// unless said otherwise. Every function enqueues on `stream` and returns the launch error.
#ifndef STOKER_TRAINER_NN_CONV_BN_KERNELS_H_
#define STOKER_TRAINER_NN_CONV_BN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/element_type.h"
#include "trainer/nn/fused_kernels.h"

namespace stoker::trainer {

// From sum[c] and sum_sq[c] over `count` values per channel: mean, invstd = 1 / sqrt(biased
// variance + eps), and the running statistics (either may be null) moved towards the
// batch's by `momentum` (unbiased variance, as torch.nn.BatchNorm2d). Precondition:
// count >= 2.
cudaError_t LaunchConvBnFinalize(const float* sum, const float* sum_sq, int channels, int64_t count,
                                 float eps, float momentum, float* running_mean, float* running_var,
                                 float* mean, float* invstd, cudaStream_t stream);

// scale = gamma * invstd and shift = beta - mean * scale, written as `scale_type` (kFloat32,
// kFloat16 or kBFloat16): x * scale + shift is the batch norm of x.
cudaError_t LaunchConvBnScaleShift(const float* gamma, const float* beta, const float* mean,
                                   const float* invstd, int channels, ElementType scale_type,
                                   void* scale, void* shift, cudaStream_t stream);

// The batch norm's data gradient with batch statistics, from g (the gradient of its output,
// ReLU mask applied), its input x and the reductions dgamma = sum(g * (x - mean) * invstd),
// dbeta = sum(g): dx = gamma * invstd * (g - dbeta / M - (x - mean) * invstd * dgamma / M),
// M = shape.rows. One pass: reads g and x, writes dx.
cudaError_t LaunchConvBnDataGradient(const void* g, const void* x, ElementType type,
                                     ChannelRows shape, const float* mean, const float* invstd,
                                     const float* gamma, const float* dgamma, const float* dbeta,
                                     void* dx, cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_CONV_BN_KERNELS_H_
