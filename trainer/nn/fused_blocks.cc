// The fused blocks (see Note [Fused blocks] in fused_blocks.h).
#include "trainer/nn/fused_blocks.h"

#include <c10/core/GradMode.h>
#include <torch/autograd.h>

#include <optional>

#include "common/torch_element_type.h"
#include "trainer/nn/sync_batch_norm.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "trainer/nn/fused_kernels.h"
#include "trainer/nn/max_pool_kernels.h"
#include "trainer/nn/torch_kernel_args.h"
#endif

namespace stoker::trainer {
namespace {

bool IsChannelsLast(const torch::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

bool KernelDtype(at::ScalarType t) { return FloatingElementType(t).has_value(); }

bool KernelsBuilt() {
#ifdef STOKER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// The composition the fused block replaces, op for op.
torch::Tensor ComposedBatchNormReLU(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                    const torch::Tensor& residual) {
  torch::Tensor out = bn.forward(x);
  if (residual.defined()) out += residual;
  return out.relu_();
}

#ifdef STOKER_WITH_CUDA

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ElementType ElementTypeOf(const torch::Tensor& t) {
  return FloatingElementType(t.scalar_type()).value_or(ElementType::kFloat32);
}

ChannelRows RowsOf(const torch::Tensor& x) {
  return {x.size(0) * x.size(2) * x.size(3), static_cast<int>(x.size(1))};
}

float* Floats(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// The shared body of the two autograd functions below (with and without a residual):
// autograd functions take no undefined inputs, so the residual's presence picks the class.
torch::Tensor BatchNormReLUForward(AutogradContext* ctx, const torch::Tensor& x,
                                   const torch::Tensor& residual, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& running_mean,
                                   const torch::Tensor& running_var, double momentum, double eps,
                                   bool training, bool relu) {
  c10::cuda::CUDAGuard guard(x.device());
  const ChannelRows shape = RowsOf(x);
  const auto f32 = x.options().dtype(at::kFloat);
  torch::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  torch::Tensor mean = at::empty({shape.channels}, f32), invstd = at::empty_like(mean);
  torch::Tensor scale = at::empty_like(mean);
  cudaStream_t stream = StreamOf(x);
  if (training) {
    torch::Tensor scratch = at::empty({BatchNormScratchFloats(shape)}, f32);
    Check(LaunchBatchNormStatistics(x.data_ptr(), ElementTypeOf(x), shape, eps, momentum,
                                    Floats(weight), Floats(running_mean), Floats(running_var),
                                    Floats(mean), Floats(invstd), Floats(scale), Floats(scratch),
                                    stream),
          "batch norm statistics");
  } else {
    Check(LaunchBatchNormFixedStatistics(Floats(running_mean), Floats(running_var), eps,
                                         Floats(weight), shape.channels, Floats(mean),
                                         Floats(invstd), Floats(scale), stream),
          "batch norm statistics");
  }
  Check(LaunchBatchNormApply(x.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr,
                             y.data_ptr(), ElementTypeOf(x), shape, Floats(mean), Floats(scale),
                             Floats(bias), relu, stream),
        "batch norm apply");
  // Without the ReLU, backward needs no mask: y is not kept alive for it.
  ctx->save_for_backward({x, relu ? y : torch::Tensor(), weight, mean, invstd});
  ctx->saved_data["training"] = training;
  ctx->saved_data["relu"] = relu;
  ctx->saved_data["residual"] = residual.defined();
  return y;
}

// {dx, dresidual (undefined without a residual), dweight, dbias}.
variable_list BatchNormReLUBackward(AutogradContext* ctx, const torch::Tensor& grad) {
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3],
                      &invstd = saved[4];
  const bool has_residual = ctx->saved_data["residual"].toBool();
  const bool relu = ctx->saved_data["relu"].toBool();
  if (!grad.defined()) return variable_list(4);
  c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor dy = grad.to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
  const ChannelRows shape = RowsOf(x);
  torch::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  torch::Tensor dresidual;
  if (has_residual) dresidual = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  torch::Tensor dweight = at::empty_like(weight), dbias = at::empty_like(weight);
  torch::Tensor scratch = at::empty({BatchNormScratchFloats(shape)}, mean.options());
  // The kernels read y only for the ReLU's mask.
  const void* y_or_unused = relu ? y.data_ptr() : dy.data_ptr();
  Check(LaunchBatchNormBackward(dy.data_ptr(), y_or_unused, x.data_ptr(), ElementTypeOf(x), shape,
                                Floats(mean), Floats(invstd), Floats(weight), relu,
                                ctx->saved_data["training"].toBool(), dx.data_ptr(),
                                has_residual ? dresidual.data_ptr() : nullptr, Floats(dweight),
                                Floats(dbias), Floats(scratch), StreamOf(x)),
        "batch norm backward");
  return {dx, dresidual, dweight, dbias};
}

// relu(bn(x)), or bn(x) with `relu` false. Inputs: x, weight, bias, running_mean,
// running_var (updated in place when training), momentum, eps, training (batch
// statistics), relu.
class BatchNormReLUFunction : public torch::autograd::Function<BatchNormReLUFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& running_mean, const torch::Tensor& running_var,
                               double momentum, double eps, bool training, bool relu) {
    return BatchNormReLUForward(ctx, x, /*residual=*/{}, weight, bias, running_mean, running_var,
                                momentum, eps, training, relu);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list g = BatchNormReLUBackward(ctx, grads[0]);
    return {g[0], g[2], g[3], {}, {}, {}, {}, {}, {}};
  }
};

// relu(bn(x) + residual); the inputs of BatchNormReLUFunction with the residual second.
class BatchNormAddReLUFunction : public torch::autograd::Function<BatchNormAddReLUFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& residual, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& running_mean,
                               const torch::Tensor& running_var, double momentum, double eps,
                               bool training) {
    return BatchNormReLUForward(ctx, x, residual, weight, bias, running_mean, running_var, momentum,
                                eps, training, /*relu=*/true);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list g = BatchNormReLUBackward(ctx, grads[0]);
    return {g[0], g[1], g[2], g[3], {}, {}, {}, {}, {}};
  }
};

class MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kernel,
                               int64_t stride, int64_t padding) {
    c10::cuda::CUDAGuard guard(x.device());
    PoolGeometry g;
    g.batch = x.size(0);
    g.channels = static_cast<int>(x.size(1));
    g.height = static_cast<int>(x.size(2));
    g.width = static_cast<int>(x.size(3));
    g.kernel = static_cast<int>(kernel);
    g.stride = static_cast<int>(stride);
    g.padding = static_cast<int>(padding);
    g.out_height = (g.height + 2 * g.padding - g.kernel) / g.stride + 1;
    g.out_width = (g.width + 2 * g.padding - g.kernel) / g.stride + 1;
    torch::Tensor y = at::empty({g.batch, g.channels, g.out_height, g.out_width}, x.options(),
                                at::MemoryFormat::ChannelsLast);
    torch::Tensor argmax = at::empty({y.numel()}, x.options().dtype(at::kByte));
    Check(LaunchMaxPoolForward(x.data_ptr(), ElementTypeOf(x), g, y.data_ptr(),
                               argmax.data_ptr<uint8_t>(), StreamOf(x)),
          "max pool forward");
    ctx->save_for_backward({argmax});
    ctx->saved_data["geometry"] = std::vector<int64_t>{
        g.batch, g.height, g.width, g.channels, g.out_height, g.out_width, kernel, stride, padding};
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);
    if (!grads[0].defined()) return out;
    const torch::Tensor argmax = ctx->get_saved_variables()[0];
    const std::vector<int64_t> v = ctx->saved_data["geometry"].toIntVector();
    PoolGeometry g;
    g.batch = v[0];
    g.height = static_cast<int>(v[1]);
    g.width = static_cast<int>(v[2]);
    g.channels = static_cast<int>(v[3]);
    g.out_height = static_cast<int>(v[4]);
    g.out_width = static_cast<int>(v[5]);
    g.kernel = static_cast<int>(v[6]);
    g.stride = static_cast<int>(v[7]);
    g.padding = static_cast<int>(v[8]);
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    c10::cuda::CUDAGuard guard(argmax.device());
    const torch::Tensor dy = grads[0].to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
    torch::Tensor dx = at::empty({g.batch, g.channels, g.height, g.width}, dy.options(),
                                 at::MemoryFormat::ChannelsLast);
    Check(LaunchMaxPoolBackward(dy.data_ptr(), argmax.data_ptr<uint8_t>(), ElementTypeOf(dy), g,
                                dx.data_ptr(), StreamOf(dy)),
          "max pool backward");
    out[0] = dx;
    return out;
  }
};

#endif  // STOKER_WITH_CUDA

}  // namespace

bool FusedBatchNormApplies(const BatchNormArguments& bn, const torch::Tensor& x,
                           const torch::Tensor& residual) {
  if (!KernelsBuilt() || !x.is_cuda() || !IsChannelsLast(x) || !KernelDtype(x.scalar_type())) {
    return false;
  }
  for (const torch::Tensor* t : {&bn.weight, &bn.bias, &bn.running_mean, &bn.running_var}) {
    if (!t->defined() || t->scalar_type() != at::kFloat || t->device() != x.device() ||
        !t->is_contiguous() || t->dim() != 1 || t->size(0) != x.size(1)) {
      return false;
    }
  }
  // One value per channel cannot be normalised by batch statistics; the composition says so.
  if (bn.training && x.size(0) * x.size(2) * x.size(3) < 2) return false;
  if (x.numel() == 0) return false;
  if (residual.defined() &&
      (!IsChannelsLast(residual) || residual.sizes() != x.sizes() ||
       residual.scalar_type() != x.scalar_type() || residual.device() != x.device())) {
    return false;
  }
  return true;
}

torch::Tensor FusedBatchNorm(const BatchNormArguments& bn, const torch::Tensor& x,
                             const torch::Tensor& residual, bool relu) {
#ifdef STOKER_WITH_CUDA
  if (residual.defined()) {
    TORCH_CHECK(relu, "FusedBatchNorm: a residual comes with the ReLU");
    return BatchNormAddReLUFunction::apply(x, residual, bn.weight, bn.bias, bn.running_mean,
                                           bn.running_var, bn.momentum, bn.eps, bn.training);
  }
  return BatchNormReLUFunction::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                      bn.momentum, bn.eps, bn.training, relu);
#else
  TORCH_CHECK(false, "FusedBatchNorm: Stoker was built without CUDA");
#endif
}

namespace {

BatchNormArguments ArgumentsOf(const torch::nn::BatchNorm2dImpl& bn) {
  BatchNormArguments a;
  if (bn.options.affine()) {
    a.weight = bn.weight;
    a.bias = bn.bias;
  }
  if (bn.options.track_running_stats()) {
    a.running_mean = bn.running_mean;
    a.running_var = bn.running_var;
  }
  a.momentum = bn.options.momentum().value_or(0.0);
  a.eps = bn.options.eps();
  a.training = bn.is_training();
  return a;
}

}  // namespace

bool FusedBatchNormApplies(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           const torch::Tensor& residual) {
  return FusedBatchNormApplies(ArgumentsOf(bn), x, residual);
}

bool FusedMaxPoolApplies(const torch::Tensor& x, int kernel) {
  return KernelsBuilt() && x.is_cuda() && IsChannelsLast(x) && KernelDtype(x.scalar_type()) &&
         x.numel() > 0 && kernel * kernel <= 255;
}

namespace {

// BatchNormReLU and BatchNorm with `fused`: the kernels where FusedBatchNormApplies (bn's
// side effects, then FusedBatchNorm), else the composition.
torch::Tensor ModuleBatchNorm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                              const torch::Tensor& residual, bool relu) {
  BatchNormArguments arguments = ArgumentsOf(bn);
  if (!FusedBatchNormApplies(arguments, x, residual)) {
    return relu ? ComposedBatchNormReLU(bn, x, residual) : bn.forward(x);
  }
  if (bn.is_training()) {
    // The momentum as torch::nn::BatchNorm2d's forward derives it.
    c10::NoGradGuard no_grad;
    bn.num_batches_tracked += 1;
    if (!bn.options.momentum().has_value()) {
      arguments.momentum = 1.0 / bn.num_batches_tracked.item<double>();
    }
  }
  return FusedBatchNorm(arguments, x, residual, relu);
}

}  // namespace

namespace {

// --sync_batchnorm in training mode: SyncBatchNorm with bn's side effects (num_batches_tracked
// counts the batch; the momentum as torch::nn::BatchNorm2d's forward derives it), then the
// residual and the ReLU as the composition adds them.
torch::Tensor SyncModuleBatchNorm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                  const torch::Tensor& residual, bool relu, BatchNormGroup& group) {
  BatchNormArguments arguments = ArgumentsOf(bn);
  if (bn.options.track_running_stats()) {
    c10::NoGradGuard no_grad;
    bn.num_batches_tracked += 1;
    if (!bn.options.momentum().has_value()) {
      arguments.momentum = 1.0 / bn.num_batches_tracked.item<double>();
    }
  }
  torch::Tensor out =
      SyncBatchNorm(x, arguments.weight, arguments.bias, arguments.running_mean,
                    arguments.running_var, arguments.momentum, arguments.eps, group);
  if (residual.defined()) out += residual;
  return relu ? out.relu_() : out;
}

}  // namespace

torch::Tensor BatchNormReLU(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual, bool fused) {
  BatchNormGroup* group = SyncBatchNormGroup();
  if (group != nullptr && bn.is_training())
    return SyncModuleBatchNorm(bn, x, residual, true, *group);
  if (!fused) return ComposedBatchNormReLU(bn, x, residual);
  return ModuleBatchNorm(bn, x, residual, /*relu=*/true);
}

torch::Tensor BatchNorm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, bool fused) {
  BatchNormGroup* group = SyncBatchNormGroup();
  if (group != nullptr && bn.is_training()) return SyncModuleBatchNorm(bn, x, {}, false, *group);
  if (!fused) return bn.forward(x);
  return ModuleBatchNorm(bn, x, /*residual=*/{}, /*relu=*/false);
}

torch::Tensor MaxPool2d(const torch::Tensor& x, int kernel, int stride, int padding, bool fused) {
  if (!fused || !FusedMaxPoolApplies(x, kernel)) {
    return torch::max_pool2d(x, {kernel, kernel}, {stride, stride}, {padding, padding});
  }
#ifdef STOKER_WITH_CUDA
  return MaxPoolFunction::apply(x, kernel, stride, padding);
#else
  return torch::max_pool2d(x, {kernel, kernel}, {stride, stride}, {padding, padding});
#endif
}

}  // namespace stoker::trainer
