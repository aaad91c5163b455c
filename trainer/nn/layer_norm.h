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
//
// A layer norm without the add (LayerNorm) reads its input in the dtype it comes in: fp32
// (the residual stream), or bf16/fp16, the autocast dtype, where a convolution or matrix
// product wrote it (ConvNeXt's blocks norm the depthwise convolution's output, Swin-V2's
// post-norm the attention's and the MLP's). Autocast would cast that input to fp32 first, a
// pass of its own each way; the kernels convert as they load instead, keep the statistics in
// fp32 and write the output in the dtype its readers take: the autocast dtype where only
// matrix products and convolutions read it (through views: ConvNeXt's permutes back to
// NCHW), else fp32, as autocast's layer_norm gives (a residual add reads Swin-V2's post-norm).
// Backward writes the input's gradient in the input's dtype (what the cast's backward would
// give) and the weight and bias gradients in fp32. The input is saved for backward as it
// came, not as an fp32 copy.
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
// dimension. Fused (FusedLayerNormApplies), y is in the autocast dtype; otherwise what
// at::layer_norm gives. Without b it is LayerNorm(a, args, kAutocastDtype).
std::pair<torch::Tensor, torch::Tensor> AddLayerNorm(const torch::Tensor& a, const torch::Tensor& b,
                                                     const LayerNormArguments& args);

// Whether AddLayerNorm and LayerNorm run the kernels: a CUDA device with bf16 or fp16
// autocast on, fp32 weight and bias of the last dimension's width on that device; with an
// add (b defined), the fp32 operand (the residual stream) and the one in the autocast dtype
// (the branch) contiguous and of one shape; without (b undefined), `a` in fp32 or the
// autocast dtype, in any layout (a strided input is made contiguous first, as ATen does).
bool FusedLayerNormApplies(const torch::Tensor& a, const torch::Tensor& b,
                           const LayerNormArguments& args);

// The dtype a layer norm's readers take its output in.
enum class LayerNormOutput {
  // Matrix products and convolutions only, which cast their input to the autocast dtype:
  // fused, the output is in the autocast dtype.
  kAutocastDtype,
  // Anything else: what autocast's layer_norm gives (fp32).
  kFloat,
};

// y = layer_norm(x) over the last dimension (Note [Layer norm with its add and cast]).
// Fused (FusedLayerNormApplies(x, {}, args)), y is in the dtype `output` names; otherwise
// what at::layer_norm gives.
torch::Tensor LayerNorm(const torch::Tensor& x, const LayerNormArguments& args,
                        LayerNormOutput output);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_LAYER_NORM_H_
