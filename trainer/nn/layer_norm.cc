#include "trainer/nn/layer_norm.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <optional>

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_element_type.h"
#include "trainer/nn/layer_norm_kernels.h"
#include "trainer/nn/torch_kernel_args.h"
#endif

namespace stoker::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::pair<torch::Tensor, torch::Tensor> Composition(const torch::Tensor& a, const torch::Tensor& b,
                                                    const LayerNormArguments& args) {
  const torch::Tensor sum = b.defined() ? at::add(a, b) : a;
  return {sum, at::layer_norm(sum, {sum.size(-1)}, args.weight, args.bias, args.eps)};
}

#ifdef STOKER_WITH_CUDA
// The autocast dtype on CUDA where autocast is on there with bf16 or fp16, else none.
std::optional<at::ScalarType> AutocastLowDtype() {
  if (!at::autocast::is_autocast_enabled(at::kCUDA)) return std::nullopt;
  const at::ScalarType low = at::autocast::get_autocast_dtype(at::kCUDA);
  if (low != at::kBFloat16 && low != at::kHalf) return std::nullopt;
  return low;
}

NormRows RowsOf(const torch::Tensor& x) {
  return {x.numel() / x.size(-1), static_cast<int>(x.size(-1))};
}

ElementType ElementTypeOf(at::ScalarType t) {
  const std::optional<ElementType> type = FloatingElementType(t);
  TORCH_CHECK(type.has_value(), "layer norm kernels: no element type for ", t);
  return *type;
}

NormTypes TypesOf(at::ScalarType x, at::ScalarType y) {
  return {ElementTypeOf(x), ElementTypeOf(y)};
}

// Forward of both autograd functions below: {sum (with a branch), y}, y in `y_dtype` (the
// branch's dtype where there is one). Saves the sum (or the input) as it is, in its dtype.
variable_list Forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& branch,
                      const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                      at::ScalarType y_dtype) {
  c10::cuda::CUDAGuard guard(x.device());
  const NormRows shape = RowsOf(x);
  torch::Tensor sum = branch.defined() ? at::empty_like(x) : x;
  torch::Tensor y = at::empty(x.sizes(), x.options().dtype(y_dtype));
  torch::Tensor mean = at::empty({shape.rows}, x.options().dtype(at::kFloat));
  torch::Tensor rstd = at::empty_like(mean);
  Check(LaunchLayerNormForward(x.data_ptr(), branch.defined() ? branch.data_ptr() : nullptr,
                               branch.defined() ? sum.data_ptr<float>() : nullptr, y.data_ptr(),
                               TypesOf(x.scalar_type(), y_dtype), weight.data_ptr<float>(),
                               bias.data_ptr<float>(), static_cast<float>(eps), shape,
                               mean.data_ptr<float>(), rstd.data_ptr<float>(), StreamOf(x)),
        "layer norm forward");
  ctx->save_for_backward({sum, weight, mean, rstd});
  ctx->saved_data["y_dtype"] = static_cast<int64_t>(y_dtype);
  if (branch.defined()) return {sum, y};
  return {y};
}

// Backward of both: the gradients of the input (the sum's operands where there was a branch:
// the residual's in fp32, the branch's in y's dtype; else the input's in its dtype), weight
// and bias (fp32).
variable_list Backward(AutogradContext* ctx, const torch::Tensor& dsum_in, torch::Tensor dy,
                       bool with_branch) {
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
  const auto y_dtype = static_cast<at::ScalarType>(ctx->saved_data["y_dtype"].toInt());
  c10::cuda::CUDAGuard guard(x.device());
  const NormRows shape = RowsOf(x);
  const NormTypes types = TypesOf(x.scalar_type(), y_dtype);
  if (!dy.defined()) dy = at::zeros(x.sizes(), x.options().dtype(y_dtype));
  dy = dy.to(y_dtype).contiguous();
  const torch::Tensor dsum_other =
      dsum_in.defined() ? dsum_in.to(at::kFloat).contiguous() : torch::Tensor();
  torch::Tensor dx = at::empty_like(x);
  torch::Tensor dbranch;
  if (with_branch) dbranch = at::empty(x.sizes(), x.options().dtype(y_dtype));
  const cudaStream_t stream = StreamOf(x);
  Check(LaunchLayerNormBackward(
            dy.data_ptr(), x.data_ptr(), types, mean.data_ptr<float>(), rstd.data_ptr<float>(),
            weight.data_ptr<float>(), dsum_other.defined() ? dsum_other.data_ptr<float>() : nullptr,
            shape, dx.data_ptr(), with_branch ? dbranch.data_ptr() : nullptr, stream),
        "layer norm backward");
  torch::Tensor scratch = at::empty({LayerNormScratchFloats(shape)}, x.options().dtype(at::kFloat));
  Check(LaunchLayerNormParameterGradients(dy.data_ptr(), x.data_ptr(), types,
                                          mean.data_ptr<float>(), rstd.data_ptr<float>(), shape,
                                          scratch.data_ptr<float>(), stream),
        "layer norm parameter gradients");
  const torch::Tensor partial = scratch.view({LayerNormChunks(shape), 2, shape.width}).sum(0);
  if (with_branch) return {dx, dbranch, partial[0], partial[1], torch::Tensor()};
  return {dx, partial[0], partial[1], torch::Tensor(), torch::Tensor()};
}

class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& residual,
                               const torch::Tensor& branch, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps) {
    return Forward(ctx, residual, branch, weight, bias, eps, branch.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return Backward(ctx, grads[0], grads[1], /*with_branch=*/true);
  }
};

// `y_dtype` is an at::ScalarType as int64_t.
class LayerNormCastFunction : public torch::autograd::Function<LayerNormCastFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                               int64_t y_dtype) {
    return Forward(ctx, x, torch::Tensor(), weight, bias, eps,
                   static_cast<at::ScalarType>(y_dtype));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return Backward(ctx, torch::Tensor(), grads[0], /*with_branch=*/false);
  }
};

bool IsParameter(const torch::Tensor& t, const torch::Tensor& x) {
  return t.defined() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() == 1 &&
         t.size(0) == x.size(-1) && t.device() == x.device();
}
#endif

}  // namespace

bool FusedLayerNormApplies(const torch::Tensor& a, const torch::Tensor& b,
                           const LayerNormArguments& args) {
#ifdef STOKER_WITH_CUDA
  // A norm over one element is its bias (zero gradient to its input): left to the composition.
  if (!a.defined() || !a.is_cuda() || a.dim() < 1 || a.numel() == 0 || a.size(-1) < 2 ||
      a.size(-1) > (1 << 20)) {
    return false;
  }
  const std::optional<at::ScalarType> low = AutocastLowDtype();
  if (!low.has_value()) return false;
  if (!b.defined()) {
    if (a.scalar_type() != at::kFloat && a.scalar_type() != *low) return false;
    return IsParameter(args.weight, a) && IsParameter(args.bias, a);
  }
  const bool a_residual = a.scalar_type() == at::kFloat;
  const torch::Tensor& residual = a_residual ? a : b;
  const torch::Tensor& branch = a_residual ? b : a;
  if (residual.scalar_type() != at::kFloat || !residual.is_contiguous()) return false;
  if (branch.scalar_type() != *low || !branch.is_contiguous() ||
      branch.sizes() != residual.sizes() || branch.device() != residual.device()) {
    return false;
  }
  return IsParameter(args.weight, residual) && IsParameter(args.bias, residual);
#else
  return false;
#endif
}

torch::Tensor LayerNorm(const torch::Tensor& x, const LayerNormArguments& args,
                        LayerNormOutput output) {
#ifdef STOKER_WITH_CUDA
  if (FusedLayerNormApplies(x, torch::Tensor(), args)) {
    const at::ScalarType y_dtype =
        output == LayerNormOutput::kAutocastDtype ? *AutocastLowDtype() : at::kFloat;
    return LayerNormCastFunction::apply(x.contiguous(), args.weight, args.bias, args.eps,
                                        static_cast<int64_t>(y_dtype))[0];
  }
#endif
  return Composition(x, torch::Tensor(), args).second;
}

std::pair<torch::Tensor, torch::Tensor> AddLayerNorm(const torch::Tensor& a, const torch::Tensor& b,
                                                     const LayerNormArguments& args) {
  if (!b.defined()) return {a, LayerNorm(a, args, LayerNormOutput::kAutocastDtype)};
#ifdef STOKER_WITH_CUDA
  if (FusedLayerNormApplies(a, b, args)) {
    const bool a_residual = a.scalar_type() == at::kFloat;
    const variable_list out = AddLayerNormFunction::apply(a_residual ? a : b, a_residual ? b : a,
                                                          args.weight, args.bias, args.eps);
    return {out[0], out[1]};
  }
#endif
  return Composition(a, b, args);
}

}  // namespace stoker::trainer
