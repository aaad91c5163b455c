// Layer norm over the last dimension with the residual add before it and the autocast cast
// after it, as one autograd function.
//
// Note [Layer norm with its add and cast]
// In a pre-norm transformer under bf16 autocast, each layer norm reads the residual stream
// (fp32) just after a residual add (fp32 + the bf16 branch), runs in fp32 (autocast's
// policy for layer_norm) and feeds a matrix product, which casts its output to bf16. That
// is three passes forward (the add, the norm, the cast) and, in backward, the cast's
// gradient back to fp32, the add of the residual stream's two gradients, and the cast of the
// branch's gradient to bf16. On a CUDA tensor with bf16 autocast on, AddLayerNorm does it in
// one pass each way: forward reads the residual and the branch once and writes their sum
// (fp32, the residual stream) and the normalised output in bf16, the dtype its matrix
// product would cast it to; backward reads the bf16 gradient, the saved sum and the sum's
// gradient from its other readers, and writes the sum's gradient in fp32 and the branch's in
// bf16, with the weight and bias gradients summed in fixed order over chunks of rows
// (deterministic). The arithmetic is fp32 throughout, as autocast's layer_norm; the values
// differ from the composition's only by the order of the fp32 sums. Everywhere else (CPU,
// other dtypes, autocast off) it is the composition: add, then at::layer_norm.
#ifndef STOKER_TRAINER_NN_LAYER_NORM_H_
#define STOKER_TRAINER_NN_LAYER_NORM_H_

#include <torch/types.h>

#include <utility>

namespace stoker::trainer {

struct LayerNormArguments {
  torch::Tensor weight, bias;  // [width], the model's own
  double eps = 1e-5;
};

// {sum, y}: sum = a + b (b undefined: sum is a itself), y = layer_norm(sum) over the last
// dimension. Fused (FusedLayerNormApplies), y is bf16; otherwise what at::layer_norm gives.
std::pair<torch::Tensor, torch::Tensor> AddLayerNorm(const torch::Tensor& a, const torch::Tensor& b,
                                                     const LayerNormArguments& args);

// Whether AddLayerNorm runs the kernels: a CUDA device with bf16 autocast on, the fp32
// operand (the residual stream) and the bf16 one (the branch; or none) contiguous and of one
// shape, fp32 weight and bias of the last dimension's width.
bool FusedLayerNormApplies(const torch::Tensor& a, const torch::Tensor& b,
                           const LayerNormArguments& args);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_LAYER_NORM_H_
