// Convolution fused with its batch norm, as NVIDIA's MLPerf ResNet runs it on Hopper: the
// batch norm never makes a pass of its own over the activation in forward, and its backward
// rides on the convolutions' data and weight gradients.
//
// Note [Conv + batch norm fusion]: a chain conv1 -> bn1 -> relu -> conv2 -> bn2 -> ... runs as
// - forward: y1 = conv1(x) with the per-channel sum and sum of squares of y1 computed in the
//   convolution's epilogue (cuDNN "genstats"); a tiny kernel finalises them into bn1's mean
//   and invstd and moves its running statistics. y2 = conv2(relu(y1 * scale1 + shift1)) with
//   the normalisation and ReLU applied to the operand as the convolution loads it (the
//   prologue), and again the statistics of y2 from the epilogue. relu(bn1(y1)) is never
//   written: only the raw convolution outputs are, and only they are kept for backward.
// - backward of conv2 and bn1: one cuDNN graph computes g = dgrad(dy2, w2) masked by the
//   ReLU (recomputed from y1) and reduces bn1's weight and bias gradients in its epilogue;
//   one elementwise pass turns g into dy1 (the batch-norm data gradient); the weight
//   gradient of conv2 is a wgrad whose operand is normalised as it is loaded.
// - a chain ends (ResNet's last batch norm of a block, with the residual add and ReLU, or the
//   downsample's batch norm) in FinishBatchNorm: one apply pass with the epilogue's
//   statistics, the fused_kernels.h backward.
// The graphs are cuDNN's runtime-fusion engines, driven through cudnn-frontend
// (conv_bn_graphs.h), built once per shape and cached. Where cuDNN has no engine for a
// shape (odd channel counts, say), that piece falls back to the unfused operations of
// today's path (ATen's convolution, Stoker's batch-norm kernels) and says so once in the
// log; results are the same within rounding either way.
//
// Applies in training mode on CUDA to bf16 or fp16 activations (under autocast or not) in
// channels_last layout, with square, undilated, ungrouped, bias-free convolutions and affine
// batch norms that track running statistics; ConvBnFusionApplies says whether it does.
// Thread-compatible, like the modules it reads.
//
//   PendingBatchNorm a = ConvWithBatchStatistics(*conv1, *bn1, x);
//   a = NormReluConvWithBatchStatistics(a, *conv2, *bn2);
//   torch::Tensor out = FinishBatchNorm(a, residual, /*relu=*/true);
#ifndef STOKER_TRAINER_NN_CONV_BN_FUSION_H_
#define STOKER_TRAINER_NN_CONV_BN_FUSION_H_

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/types.h>

namespace stoker::trainer {

// A convolution's output before its batch norm, with the batch statistics of that output:
// what the next fused convolution normalises as it loads it.
struct PendingBatchNorm {
  torch::Tensor y;                           // the convolution's output, channels_last
  torch::Tensor mean, invstd;                // [C] fp32 batch statistics of y (no gradient)
  torch::nn::BatchNorm2dImpl* bn = nullptr;  // the batch norm to apply; not owned
};

// Whether conv followed by bn fuses for input x (see the file comment).
bool ConvBnFusionApplies(const torch::nn::Conv2dImpl& conv, const torch::nn::BatchNorm2dImpl& bn,
                         const torch::Tensor& x);

// conv(x) with bn's batch statistics. bn's side effects happen here: its running statistics
// move by its momentum and num_batches_tracked counts the batch. Requires
// ConvBnFusionApplies(conv, bn, x).
PendingBatchNorm ConvWithBatchStatistics(torch::nn::Conv2dImpl& conv,
                                         torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x);

// conv(relu(in.bn(in.y))) with out_bn's batch statistics (and its side effects). Requires
// ConvBnFusionApplies(conv, out_bn, in.y).
PendingBatchNorm NormReluConvWithBatchStatistics(const PendingBatchNorm& in,
                                                 torch::nn::Conv2dImpl& conv,
                                                 torch::nn::BatchNorm2dImpl& out_bn);

// in.bn(in.y) (+ residual), then ReLU when `relu`: the end of a chain. A residual comes
// with the ReLU.
torch::Tensor FinishBatchNorm(const PendingBatchNorm& in, const torch::Tensor& residual, bool relu);

// With false, every piece runs the unfused path, as where cuDNN has no engine (tests of
// that path). Default true.
void SetConvBnGraphsEnabledForTesting(bool enabled);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_CONV_BN_FUSION_H_
