#include "trainer/nn/layer_norm.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "trainer/nn/layer_norm_kernels.h"
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
void Check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, what, ": ", cudaGetErrorString(e));
}

cudaStream_t StreamOf(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

NormRows RowsOf(const torch::Tensor& x) {
  return {x.numel() / x.size(-1), static_cast<int>(x.size(-1))};
}

// Forward of both autograd functions below: {sum (with a branch), y}.
variable_list Forward(AutogradContext* ctx, const torch::Tensor& residual,
                      const torch::Tensor& branch, const torch::Tensor& weight,
                      const torch::Tensor& bias, double eps) {
  c10::cuda::CUDAGuard guard(residual.device());
  const NormRows shape = RowsOf(residual);
  torch::Tensor sum = branch.defined() ? at::empty_like(residual) : residual;
  torch::Tensor y = at::empty(residual.sizes(), residual.options().dtype(at::kBFloat16));
  torch::Tensor mean = at::empty({shape.rows}, residual.options());
  torch::Tensor rstd = at::empty_like(mean);
  Check(LaunchLayerNormForward(
            residual.data_ptr<float>(), branch.defined() ? branch.data_ptr() : nullptr,
            branch.defined() ? sum.data_ptr<float>() : nullptr, y.data_ptr(),
            weight.data_ptr<float>(), bias.data_ptr<float>(), static_cast<float>(eps), shape,
            mean.data_ptr<float>(), rstd.data_ptr<float>(), StreamOf(residual)),
        "layer norm forward");
  ctx->save_for_backward({sum, weight, mean, rstd});
  if (branch.defined()) return {sum, y};
  return {y};
}

// Backward of both: the gradients of (residual[, branch], weight, bias).
variable_list Backward(AutogradContext* ctx, const torch::Tensor& dsum_in, torch::Tensor dy,
                       bool with_branch) {
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor &sum = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
  c10::cuda::CUDAGuard guard(sum.device());
  const NormRows shape = RowsOf(sum);
  if (!dy.defined()) dy = at::zeros(sum.sizes(), sum.options().dtype(at::kBFloat16));
  dy = dy.to(at::kBFloat16).contiguous();
  const torch::Tensor dsum_other =
      dsum_in.defined() ? dsum_in.to(at::kFloat).contiguous() : torch::Tensor();
  torch::Tensor dsum = at::empty_like(sum);
  torch::Tensor dbranch;
  if (with_branch) dbranch = at::empty(sum.sizes(), sum.options().dtype(at::kBFloat16));
  const cudaStream_t stream = StreamOf(sum);
  Check(LaunchLayerNormBackward(
            dy.data_ptr(), sum.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
            weight.data_ptr<float>(), dsum_other.defined() ? dsum_other.data_ptr<float>() : nullptr,
            shape, dsum.data_ptr<float>(), with_branch ? dbranch.data_ptr() : nullptr, stream),
        "layer norm backward");
  torch::Tensor scratch = at::empty({LayerNormScratchFloats(shape)}, sum.options());
  Check(LaunchLayerNormParameterGradients(dy.data_ptr(), sum.data_ptr<float>(),
                                          mean.data_ptr<float>(), rstd.data_ptr<float>(), shape,
                                          scratch.data_ptr<float>(), stream),
        "layer norm parameter gradients");
  const torch::Tensor partial = scratch.view({LayerNormChunks(shape), 2, shape.width}).sum(0);
  if (with_branch) return {dsum, dbranch, partial[0], partial[1], torch::Tensor()};
  return {dsum, partial[0], partial[1], torch::Tensor()};
}

class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& residual,
                               const torch::Tensor& branch, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps) {
    return Forward(ctx, residual, branch, weight, bias, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return Backward(ctx, grads[0], grads[1], /*with_branch=*/true);
  }
};

class LayerNormCastFunction : public torch::autograd::Function<LayerNormCastFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
    return Forward(ctx, x, torch::Tensor(), weight, bias, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return Backward(ctx, torch::Tensor(), grads[0], /*with_branch=*/false);
  }
};
#endif

bool IsParameter(const torch::Tensor& t, int64_t width) {
  return t.defined() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() == 1 &&
         t.size(0) == width;
}

}  // namespace

bool FusedLayerNormApplies(const torch::Tensor& a, const torch::Tensor& b,
                           const LayerNormArguments& args) {
#ifdef STOKER_WITH_CUDA
  // A norm over one element is its bias (zero gradient to its input): left to the composition.
  if (!a.is_cuda() || a.dim() < 1 || a.numel() == 0 || a.size(-1) < 2 || a.size(-1) > (1 << 20)) {
    return false;
  }
  if (!at::autocast::is_autocast_enabled(at::kCUDA) ||
      at::autocast::get_autocast_dtype(at::kCUDA) != at::kBFloat16) {
    return false;
  }
  const bool a_residual = a.scalar_type() == at::kFloat;
  const torch::Tensor& residual = a_residual || !b.defined() ? a : b;
  const torch::Tensor& branch = a_residual || !b.defined() ? b : a;
  if (residual.scalar_type() != at::kFloat || !residual.is_contiguous()) return false;
  if (branch.defined() &&
      (branch.scalar_type() != at::kBFloat16 || !branch.is_contiguous() ||
       branch.sizes() != residual.sizes() || branch.device() != residual.device())) {
    return false;
  }
  return IsParameter(args.weight, residual.size(-1)) && IsParameter(args.bias, residual.size(-1));
#else
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> AddLayerNorm(const torch::Tensor& a, const torch::Tensor& b,
                                                     const LayerNormArguments& args) {
#ifdef STOKER_WITH_CUDA
  if (FusedLayerNormApplies(a, b, args)) {
    if (!b.defined()) {
      return {a, LayerNormCastFunction::apply(a, args.weight, args.bias, args.eps)[0]};
    }
    const bool a_residual = a.scalar_type() == at::kFloat;
    const variable_list out = AddLayerNormFunction::apply(a_residual ? a : b, a_residual ? b : a,
                                                          args.weight, args.bias, args.eps);
    return {out[0], out[1]};
  }
#endif
  return Composition(a, b, args);
}

}  // namespace stoker::trainer
