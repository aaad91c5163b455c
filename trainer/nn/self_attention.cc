#include "trainer/nn/self_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace stoker::trainer {
namespace {

// [N, L, 3E] -> [3, N, heads, L, D]: a view (q, k and v along the first dimension).
at::Tensor HeadsView(const at::Tensor& packed, int64_t heads) {
  const int64_t n = packed.size(0), l = packed.size(1), e3 = packed.size(2);
  return packed.view({n, l, 3, heads, e3 / 3 / heads}).permute({2, 0, 3, 1, 4});
}

// Note [Self-attention without layout copies]: the views forward, one gradient backward.
class SplitHeadsFunction : public torch::autograd::Function<SplitHeadsFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& packed, int64_t heads) {
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["sizes"] = packed.sizes().vec();
    const at::Tensor qkv = HeadsView(packed, heads);
    return {qkv.select(0, 0), qkv.select(0, 1), qkv.select(0, 2)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    at::Tensor like;
    for (const at::Tensor& g : grads) {
      if (g.defined()) like = g;
    }
    at::Tensor packed =
        at::empty(sizes, like.options().memory_format(at::MemoryFormat::Contiguous));
    const at::Tensor qkv = HeadsView(packed, heads);
    for (int64_t i = 0; i < 3; ++i) {
      at::Tensor part = qkv.select(0, i);
      if (grads[i].defined()) {
        part.copy_(grads[i]);
      } else {
        part.zero_();
      }
    }
    return {packed, at::Tensor()};
  }
};

}  // namespace

std::vector<torch::Tensor> SplitHeads(const torch::Tensor& packed, int64_t heads) {
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) % (3 * heads) == 0,
              "SplitHeads takes [N, L, 3E] with E divisible by ", heads, " heads, got ",
              packed.sizes());
  return SplitHeadsFunction::apply(packed, heads);
}

torch::Tensor SelfAttention(const torch::Tensor& x, const SelfAttentionArguments& args) {
  TORCH_CHECK(x.dim() == 3, "self-attention takes [N, L, E], got ", x.sizes());
  const int64_t n = x.size(0), l = x.size(1), e = x.size(2);
  TORCH_CHECK(args.heads > 0 && e % args.heads == 0, "embedding width ", e, " is not divisible by ",
              args.heads, " heads");
  const at::Tensor packed = Fp8Linear(x, args.in_weight, args.in_bias, args.in_fp8);
  const std::vector<at::Tensor> qkv = SplitHeads(packed, args.heads);
  std::optional<at::Tensor> mask;
  if (args.attn_mask.defined()) mask = args.attn_mask;
  const at::Tensor attended = at::scaled_dot_product_attention(
      qkv[0], qkv[1], qkv[2], mask, args.dropout_p, args.is_causal, args.scale);
  // [N, H, L, D] -> [N, L, E]: a view where the kernel wrote [N, L, H, D], a copy elsewhere.
  const at::Tensor merged = attended.transpose(1, 2).reshape({n, l, e});
  return Fp8Linear(merged, args.out_weight, args.out_bias, args.out_fp8);
}

}  // namespace stoker::trainer
