#include "trainer/nn/fp8_linear.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <cstdint>
#include <utility>

#include "common/torch_element_type.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "trainer/nn/fp8_kernels.h"
#include "trainer/nn/torch_kernel_args.h"
#endif

namespace stoker::trainer {
namespace {

bool IsFloating(at::ScalarType t) { return FloatingElementType(t).has_value(); }

}  // namespace

bool Fp8WeightFits(at::IntArrayRef weight_sizes) {
  return weight_sizes.size() == 2 && weight_sizes[0] > 0 && weight_sizes[1] > 0 &&
         weight_sizes[0] % 16 == 0 && weight_sizes[1] % 16 == 0;
}

bool Fp8LinearApplies(const torch::Tensor& x, const torch::Tensor& weight,
                      const torch::Tensor& bias) {
#ifdef STOKER_WITH_CUDA
  if (!x.defined() || !weight.defined() || !x.is_cuda() || !weight.is_cuda() ||
      x.device() != weight.device()) {
    return false;
  }
  if (!IsFloating(x.scalar_type()) || !IsFloating(weight.scalar_type())) return false;
  if (!Fp8WeightFits(weight.sizes()) || x.dim() < 1 || x.size(-1) != weight.size(1) ||
      x.numel() == 0) {
    return false;
  }
  if (bias.defined() && (!bias.is_cuda() || bias.device() != x.device() || bias.dim() != 1 ||
                         bias.size(0) != weight.size(0) || !IsFloating(bias.scalar_type()))) {
    return false;
  }
  return true;
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

#ifdef STOKER_WITH_CUDA
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `t` contiguous, its data 16-byte aligned (the cast kernel's vector loads).
at::Tensor Aligned(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();
  return c;
}

int64_t PaddedRows(int64_t rows) { return (rows + 15) / 16 * 16; }

Fp8Format FormatOf(const Fp8LinearState& state, Fp8Role role) {
  return role == Fp8Role::kGradOutput && !state.recipe().e4m3_gradients ? Fp8Format::kE5M2
                                                                        : Fp8Format::kE4M3;
}

at::ScalarType DtypeOf(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

float* RowOf(at::Tensor& scaling, Fp8Role role) {
  return scaling.data_ptr<float>() + static_cast<int64_t>(role) * scaling.size(1);
}

void UpdateScales(Fp8LinearState& state, at::Tensor& scaling, Fp8Role first, int roles,
                  cudaStream_t stream) {
  const float max_values[kFp8Roles] = {Fp8MaxValue(FormatOf(state, Fp8Role::kInput)),
                                       Fp8MaxValue(FormatOf(state, Fp8Role::kWeight)),
                                       Fp8MaxValue(FormatOf(state, Fp8Role::kGradOutput))};
  Check(LaunchFp8ScaleUpdate(scaling.data_ptr<float>(), state.recipe().history,
                             static_cast<int>(first), roles, max_values, state.recipe().margin,
                             stream),
        "FP8 scale update");
}

// An FP8 copy of a matrix: q [rows, cols], its transpose qt [cols, padded rows] where asked,
// and the inverse of the scale they were cast with (a device scalar).
struct Fp8Matrix {
  at::Tensor q, qt, scale_inv;
};

// Casts `m` (2-D, Aligned) with `role`'s scale, folding its amax into the role's
// accumulator; a role's first cast is preceded by an amax-only pass and an update. The
// caller updates the scales after its casts.
Fp8Matrix Cast(Fp8LinearState& state, at::Tensor& scaling, Fp8Role role, const at::Tensor& m,
               bool transpose, int64_t padded_rows, cudaStream_t stream) {
  const int h = state.recipe().history;
  float* row = RowOf(scaling, role);
  Fp8CastArguments args;
  args.x = m.data_ptr();
  args.type = FloatingElementType(m.scalar_type()).value();  // Fp8LinearApplies checked it
  args.rows = m.size(0);
  args.cols = m.size(1);
  args.format = FormatOf(state, role);
  args.scale = row + h + 1;
  args.amax = row + h;
  if (!state.primed(role)) {
    Check(LaunchFp8Cast(args, stream), "FP8 amax");
    UpdateScales(state, scaling, role, 1, stream);
    state.primed(role) = true;
  }
  const at::TensorOptions bytes = m.options().dtype(DtypeOf(args.format));
  Fp8Matrix out;
  out.q = at::empty({args.rows, args.cols}, bytes);
  out.scale_inv = at::empty({}, m.options().dtype(at::kFloat));
  args.q = static_cast<uint8_t*>(out.q.data_ptr());
  args.scale_inv = out.scale_inv.data_ptr<float>();
  if (transpose) {
    out.qt = at::empty({args.cols, padded_rows}, bytes);
    args.qt = static_cast<uint8_t*>(out.qt.data_ptr());
    args.padded_rows = padded_rows;
  }
  Check(LaunchFp8Cast(args, stream), "FP8 cast");
  return out;
}

// Forward of Fp8Linear (Note [FP8 linear layers]). `grad`: whether backward may run.
class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias,
                               const c10::intrusive_ptr<Fp8LinearState>& state, bool grad) {
    c10::cuda::CUDAGuard guard(x.device());
    const cudaStream_t stream = StreamOf(x);
    const int64_t in = weight.size(1), out = weight.size(0);
    const at::Tensor x2d = Aligned(x.reshape({-1, in}));
    const at::Tensor w = Aligned(weight);
    const int64_t rows = x2d.size(0);
    at::Tensor& scaling = state->DeviceState(x.device());
    const bool input_grad = grad && x.requires_grad();
    const bool weight_grad = grad && weight.requires_grad();
    // dW needs x^T; dx needs W^T.
    const Fp8Matrix xq =
        Cast(*state, scaling, Fp8Role::kInput, x2d, weight_grad, PaddedRows(rows), stream);
    const Fp8Matrix wq = Cast(*state, scaling, Fp8Role::kWeight, w, input_grad, out, stream);
    UpdateScales(*state, scaling, Fp8Role::kInput, 2, stream);
    state->CountCall();

    const at::ScalarType out_dtype = at::autocast::is_autocast_enabled(at::kCUDA)
                                         ? at::autocast::get_autocast_dtype(at::kCUDA)
                                         : x.scalar_type();
    // _scaled_mm adds a bias of the output's dtype in its epilogue (bf16 or fp16 only).
    const bool epilogue_bias =
        bias.defined() && (out_dtype == at::kBFloat16 || out_dtype == at::kHalf);
    std::optional<at::Tensor> epilogue;
    if (epilogue_bias) epilogue = bias.to(out_dtype);
    at::Tensor y = at::_scaled_mm(xq.q, wq.q.t(), xq.scale_inv, wq.scale_inv, epilogue,
                                  std::nullopt, out_dtype, /*use_fast_accum=*/true);
    if (bias.defined() && !epilogue_bias) y.add_(bias.to(out_dtype));

    ctx->save_for_backward({xq.qt, wq.qt, xq.scale_inv, wq.scale_inv});
    ctx->saved_data["state"] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(state));
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["bias_dtype"] =
        static_cast<int64_t>(bias.defined() ? bias.scalar_type() : at::kFloat);
    std::vector<int64_t> y_sizes = x.sizes().vec();
    y_sizes.back() = out;
    // Not a view: the program may update the output in place (a residual add_).
    return {at::_unsafe_view(y, y_sizes)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &xqt = saved[0], &wqt = saved[1], &x_scale_inv = saved[2],
                     &w_scale_inv = saved[3];
    auto state =
        c10::static_intrusive_pointer_cast<Fp8LinearState>(ctx->saved_data["state"].toCapsule());
    const std::vector<int64_t> x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const auto bias_dtype = static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    const bool input_grad = ctx->needs_input_grad(0) && wqt.defined();
    const bool weight_grad = ctx->needs_input_grad(1) && xqt.defined();
    const bool bias_grad = ctx->needs_input_grad(2);
    at::Tensor dy = grads[0];
    if (!dy.defined() || (!input_grad && !weight_grad && !bias_grad)) {
      return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    c10::cuda::CUDAGuard guard(dy.device());
    const cudaStream_t stream = StreamOf(dy);
    const int64_t out = dy.size(-1);
    if (!IsFloating(dy.scalar_type())) dy = dy.to(at::kBFloat16);
    const at::Tensor dy2d = Aligned(dy.reshape({-1, out}));
    const int64_t rows = dy2d.size(0);
    at::Tensor& scaling = state->DeviceState(dy.device());

    at::Tensor dx, dw, db;
    if (input_grad || weight_grad) {
      const Fp8Matrix gq =
          Cast(*state, scaling, Fp8Role::kGradOutput, dy2d, weight_grad, PaddedRows(rows), stream);
      UpdateScales(*state, scaling, Fp8Role::kGradOutput, 1, stream);
      if (input_grad) {
        // [rows, out] x [out, in]: W^T [in, out] row-major is W column-major.
        dx = at::_scaled_mm(gq.q, wqt.t(), gq.scale_inv, w_scale_inv, std::nullopt, std::nullopt,
                            x_dtype, /*use_fast_accum=*/false)
                 .reshape(x_sizes);
      }
      if (weight_grad) {
        // [out, rows] x [rows, in], rows padded with zeros on both sides.
        dw = at::_scaled_mm(gq.qt, xqt.t(), gq.scale_inv, x_scale_inv, std::nullopt, std::nullopt,
                            weight_dtype, /*use_fast_accum=*/false);
      }
    }
    if (bias_grad) db = dy2d.sum(0, /*keepdim=*/false, at::kFloat).to(bias_dtype);
    return {dx, dw, db, at::Tensor(), at::Tensor()};
  }
};

}  // namespace
#endif

torch::Tensor Fp8Linear(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias,
                        const c10::intrusive_ptr<Fp8LinearState>& state) {
#ifdef STOKER_WITH_CUDA
  if (state && Fp8LinearApplies(x, weight, bias)) {
    const bool grad = at::GradMode::is_enabled();
    return Fp8LinearFunction::apply(x, weight, bias, state, grad)[0];
  }
#endif
  (void)state;
  return at::linear(x, weight, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
}

}  // namespace stoker::trainer
