// Fused building blocks of the built-in models: batch norm with its ReLU, or with a
// residual add and ReLU, or alone, and max pooling, each one autograd function with a forward and a
// backward written as few passes over the activation as the maths allows.
//
// Note [Fused blocks]: on a CUDA tensor in channels_last layout (fp32, fp16 or bf16 with
// fp32 batch-norm parameters) the blocks run Stoker's kernels (fused_kernels.h,
// max_pool_kernels.h):
// - batch norm + (add +) ReLU forward: one pass for the batch statistics, one that writes
//   relu((x - mean) * scale + bias (+ residual)); backward: one reduction pass over
//   (dy, y, x) that also writes the residual's gradient, one pass that writes dx. Nothing is
//   stored beyond x, the output y (the next layer's input, kept anyway) and two floats per
//   channel; the normalised value is recomputed in backward.
// - max pooling stores a one-byte argmax per output instead of an int64 index, and its
//   backward gathers (no zero fill, no atomics).
// Everywhere else (CPU, NCHW layout, other dtypes, fused blocks turned off) they are the
// libtorch composition they replace, op for op: the reference the fused kernels are tested
// against, and what the CPU path runs.
#ifndef STOKER_TRAINER_NN_FUSED_BLOCKS_H_
#define STOKER_TRAINER_NN_FUSED_BLOCKS_H_

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

namespace stoker::trainer {

// relu(bn(x) + residual), or relu(bn(x)) when `residual` is undefined: what `bn->forward(x)`
// followed by `+= residual` and `relu_()` computes, with the same side effects (in training
// mode the running statistics move by bn's momentum and num_batches_tracked counts the
// batch). `fused` false always takes the composition.
torch::Tensor BatchNormReLU(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual, bool fused);

// bn->forward(x): batch norm without an activation (a ResNet's downsample branch), with the
// same side effects; fused, it is the kernels of BatchNormReLU with the ReLU left out.
torch::Tensor BatchNorm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, bool fused);

// torch::max_pool2d(x, kernel, stride, padding) (dilation 1, floor mode).
torch::Tensor MaxPool2d(const torch::Tensor& x, int kernel, int stride, int padding, bool fused);

// Whether BatchNormReLU / MaxPool2d would run the fused kernels for these arguments.
bool FusedBatchNormApplies(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           const torch::Tensor& residual);
bool FusedMaxPoolApplies(const torch::Tensor& x, int kernel);

// The block in the terms of aten::batch_norm, for callers that hold the tensors rather than
// a module (programs exported from Python). `weight`, `bias` and the running statistics are
// the model's own: training moves the running statistics in place by `momentum`; counting
// num_batches_tracked stays with the caller, as in aten::batch_norm.
struct BatchNormArguments {
  torch::Tensor weight, bias, running_mean, running_var;
  double momentum = 0.1;
  double eps = 1e-5;
  bool training = true;
};
bool FusedBatchNormApplies(const BatchNormArguments& bn, const torch::Tensor& x,
                           const torch::Tensor& residual);
// relu(batch_norm(x) (+ residual)), or batch_norm(x) with `relu` false (and no residual),
// through the fused kernels. Requires FusedBatchNormApplies(bn, x, residual).
torch::Tensor FusedBatchNorm(const BatchNormArguments& bn, const torch::Tensor& x,
                             const torch::Tensor& residual, bool relu);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_FUSED_BLOCKS_H_
