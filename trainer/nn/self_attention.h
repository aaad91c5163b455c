// Multi-head self-attention over a batch-first sequence, as torch.nn.MultiheadAttention
// computes it (packed in-projection, scaled_dot_product_attention, out-projection), without
// the layout copies of its decomposition.
//
// Note [Self-attention without layout copies]
// nn.MultiheadAttention works on [L, N, E] sequences: a batch-first model's call transposes
// its input, projects it to q, k and v at once ([L, N, 3E]), makes that contiguous as
// [3, L, N, E], takes q, k and v as views of it, and transposes the attention's output back
// through another copy. Exported, that is a strided copy of the input, one of the packed
// projection, and in backward a zero-filled [3, L, N, E] per view with a copy into it, a
// strided gradient for the residual stream, and more copies to make it contiguous.
// SelfAttention computes the same values in the batch-first layout itself: the projection
// of x [N, L, E] is [N, L, 3E]; q, k and v are strided views of it ([N, H, L, D] with the
// head dimension D contiguous, which the flash and cuDNN attention kernels read as they
// are); the attention's output, laid out [N, L, H, D] by those kernels, is a view as
// [N, L, E] for the out-projection; the result is a contiguous [N, L, E]. In backward, the
// gradients of q, k and v are written straight into one gradient of the projection (one
// pass, no fill). Autocast applies as to the decomposition (the projections and the
// attention run in the lower precision).
#ifndef STOKER_TRAINER_NN_SELF_ATTENTION_H_
#define STOKER_TRAINER_NN_SELF_ATTENTION_H_

#include <torch/types.h>

#include <optional>

#include "trainer/nn/fp8_linear.h"

namespace stoker::trainer {

// The module's tensors and settings. `heads` divides the embedding width E.
struct SelfAttentionArguments {
  torch::Tensor in_weight;   // [3E, E]
  torch::Tensor in_bias;     // [3E] or undefined
  torch::Tensor out_weight;  // [E, E]
  torch::Tensor out_bias;    // [E] or undefined
  int64_t heads = 1;
  torch::Tensor attn_mask;  // undefined for none
  double dropout_p = 0.0;   // attention dropout, drawn from the default generator
  bool is_causal = false;
  std::optional<double> scale;
  // Where set, that projection runs in FP8 (Note [FP8 linear layers], nn/fp8_linear.h).
  c10::intrusive_ptr<Fp8LinearState> in_fp8;
  c10::intrusive_ptr<Fp8LinearState> out_fp8;
};

// Self-attention of x [N, L, E]: out_proj(attention(in_proj(x) split into heads)), a
// contiguous [N, L, E].
torch::Tensor SelfAttention(const torch::Tensor& x, const SelfAttentionArguments& args);

// The heads of a packed projection [N, L, 3E]: q, k and v, each [N, heads, L, E / heads], as
// views of it. Backward writes the three gradients into one gradient of `packed`.
std::vector<torch::Tensor> SplitHeads(const torch::Tensor& packed, int64_t heads);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_SELF_ATTENTION_H_
