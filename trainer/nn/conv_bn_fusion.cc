// Convolution + batch norm fusion (see Note [Conv + batch norm fusion] in conv_bn_fusion.h).
#include "trainer/nn/conv_bn_fusion.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "trainer/nn/conv_bn_graphs.h"
#include "trainer/nn/conv_bn_kernels.h"
#include "trainer/nn/fused_kernels.h"
#include "trainer/nn/sync_batch_norm.h"

namespace stoker::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<bool> graphs_disabled{false};

ElementType ElementTypeOf(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return ElementType::kFloat16;
    case at::kBFloat16:
      return ElementType::kBFloat16;
    default:
      return ElementType::kFloat32;
  }
}

at::ScalarType ScalarTypeOf(ElementType t) {
  switch (t) {
    case ElementType::kFloat16:
      return at::kHalf;
    case ElementType::kBFloat16:
      return at::kBFloat16;
    default:
      return at::kFloat;
  }
}

ChannelRows RowsOf(const torch::Tensor& x) {
  return {x.size(0) * x.size(2) * x.size(3), static_cast<int>(x.size(1))};
}

float* Floats(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

void Check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "conv_bn_fusion: ", what, ": ", cudaGetErrorString(e));
}

void Check(const absl::Status& status) {
  TORCH_CHECK(status.ok(), "conv_bn_fusion: ", std::string(status.message()));
}

cudaStream_t CurrentStream(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

ConvShape ShapeOf(const torch::Tensor& x, const torch::Tensor& w, int64_t stride, int64_t padding) {
  ConvShape s;
  s.batch = x.size(0);
  s.in_channels = x.size(1);
  s.height = x.size(2);
  s.width = x.size(3);
  s.out_channels = w.size(0);
  s.kernel = w.size(2);
  s.stride = stride;
  s.padding = padding;
  s.type = ElementTypeOf(x.scalar_type());
  return s;
}

// The plan of (kind, shape), or nothing where cuDNN has no engine (logged once per shape)
// or the graphs are turned off.
std::optional<ConvBnPlanInfo> PlanOf(ConvBnGraph kind, const ConvShape& shape) {
  if (graphs_disabled.load(std::memory_order_relaxed)) return std::nullopt;
  absl::StatusOr<ConvBnPlanInfo> info = PrepareConvBnGraph(kind, shape);
  if (info.ok()) return *info;
  static std::mutex mu;
  static std::set<std::string>* logged = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (logged->insert(absl::StrCat(ConvBnGraphName(kind), " ", shape.ToString())).second) {
    LogWarning("conv_bn_fusion: %s; this piece runs unfused", info.status().message());
  }
  return std::nullopt;
}

torch::Tensor Workspace(const ConvBnPlanInfo& info, const torch::Tensor& like) {
  return at::empty({std::max<int64_t>(info.workspace_bytes, 1)}, like.options().dtype(at::kByte));
}

torch::Tensor Conv(const torch::Tensor& x, const torch::Tensor& w, int64_t stride,
                   int64_t padding) {
  return at::convolution(x, w, /*bias=*/{}, {stride, stride}, {padding, padding}, {1, 1},
                         /*transposed=*/false, {0, 0}, /*groups=*/1);
}

// dx and/or dw of y = conv(x, w).
std::tuple<torch::Tensor, torch::Tensor> ConvBackward(const torch::Tensor& dy,
                                                      const torch::Tensor& x,
                                                      const torch::Tensor& w, int64_t stride,
                                                      int64_t padding, bool want_dx, bool want_dw) {
  auto [dx, dw, unused] = at::convolution_backward(dy, x, w, /*bias_sizes=*/std::nullopt,
                                                   {stride, stride}, {padding, padding}, {1, 1},
                                                   false, {0, 0}, 1, {want_dx, want_dw, false});
  return {dx, dw};
}

// bn's scale and shift (x * scale + shift = bn(x)) from its weight, bias and statistics.
std::pair<torch::Tensor, torch::Tensor> ScaleShift(const torch::Tensor& gamma,
                                                   const torch::Tensor& beta,
                                                   const torch::Tensor& mean,
                                                   const torch::Tensor& invstd, ElementType type,
                                                   cudaStream_t stream) {
  torch::Tensor scale = at::empty({gamma.size(0)}, gamma.options().dtype(ScalarTypeOf(type)));
  torch::Tensor shift = at::empty_like(scale);
  Check(LaunchConvBnScaleShift(Floats(gamma), Floats(beta), Floats(mean), Floats(invstd),
                               static_cast<int>(gamma.size(0)), type, scale.data_ptr(),
                               shift.data_ptr(), stream),
        "scale and shift");
  return {scale, shift};
}

// relu(bn(x)) written out: the operand the fused graphs normalise as they load it, for the
// pieces that run unfused.
torch::Tensor NormRelu(const torch::Tensor& x, const torch::Tensor& gamma,
                       const torch::Tensor& beta, const torch::Tensor& mean,
                       const torch::Tensor& invstd, cudaStream_t stream) {
  auto [scale, shift] = ScaleShift(gamma, beta, mean, invstd, ElementType::kFloat32, stream);
  torch::Tensor a = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  Check(LaunchBatchNormApply(x.data_ptr(), nullptr, a.data_ptr(), ElementTypeOf(x.scalar_type()),
                             RowsOf(x), Floats(mean), Floats(scale), Floats(beta), /*relu=*/true,
                             stream),
        "batch norm apply");
  return a;
}

struct BatchStatistics {
  torch::Tensor mean, invstd;
};

// The statistics of y from its per-channel sums; moves the running statistics.
BatchStatistics Finalize(const torch::Tensor& sum, const torch::Tensor& sum_sq, int64_t count,
                         const torch::Tensor& running_mean, const torch::Tensor& running_var,
                         double momentum, double eps, cudaStream_t stream) {
  BatchStatistics s{at::empty_like(sum), at::empty_like(sum)};
  Check(LaunchConvBnFinalize(Floats(sum), Floats(sum_sq), static_cast<int>(sum.size(0)), count,
                             static_cast<float>(eps), static_cast<float>(momentum),
                             Floats(running_mean), Floats(running_var), Floats(s.mean),
                             Floats(s.invstd), stream),
        "batch norm statistics");
  return s;
}

// The statistics of y computed after the fact (the unfused path).
BatchStatistics StatisticsOf(const torch::Tensor& y, const torch::Tensor& running_mean,
                             const torch::Tensor& running_var, double momentum, double eps) {
  auto [mean, invstd] = at::batch_norm_stats(y, eps);
  mean = mean.to(at::kFloat);
  invstd = invstd.to(at::kFloat);
  const double count = static_cast<double>(y.numel() / y.size(1));
  torch::Tensor var = invstd.pow(-2).sub_(eps);
  running_mean.mul_(1.0 - momentum).add_(mean, momentum);
  running_var.mul_(1.0 - momentum).add_(var, momentum * count / (count - 1.0));
  return {mean, invstd};
}

// y = conv(x', w) with x' = x or relu(x * scale + shift), and its batch statistics. Returns
// {y, mean, invstd}.
variable_list ForwardWithStatistics(const torch::Tensor& x, const torch::Tensor& w,
                                    const torch::Tensor* gamma, const torch::Tensor* beta,
                                    const torch::Tensor* mean_in, const torch::Tensor* invstd_in,
                                    const torch::Tensor& running_mean,
                                    const torch::Tensor& running_var, int64_t stride,
                                    int64_t padding, double momentum, double eps) {
  c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = CurrentStream(x);
  const bool prologue = gamma != nullptr;
  const ConvShape shape = ShapeOf(x, w, stride, padding);
  const ConvBnGraph kind =
      prologue ? ConvBnGraph::kNormReluForwardStats : ConvBnGraph::kForwardStats;
  BatchStatistics stats;
  torch::Tensor y;
  if (std::optional<ConvBnPlanInfo> plan = PlanOf(kind, shape)) {
    y = at::empty({shape.batch, shape.out_channels, shape.out_height(), shape.out_width()},
                  x.options(), at::MemoryFormat::ChannelsLast);
    torch::Tensor sums = at::empty({2, shape.out_channels}, x.options().dtype(at::kFloat));
    torch::Tensor sum = sums[0], sum_sq = sums[1];
    ConvBnTensors t;
    t.x = x.data_ptr();
    t.w = w.data_ptr();
    t.y = y.data_ptr();
    t.sum = Floats(sum);
    t.sum_sq = Floats(sum_sq);
    torch::Tensor scale, shift;
    if (prologue) {
      std::tie(scale, shift) =
          ScaleShift(*gamma, *beta, *mean_in, *invstd_in, plan->scale_type, stream);
      t.scale = scale.data_ptr();
      t.shift = shift.data_ptr();
    }
    torch::Tensor workspace = Workspace(*plan, x);
    Check(RunConvBnGraph(kind, shape, t, workspace.data_ptr(), stream));
    stats = Finalize(sum, sum_sq, y.numel() / y.size(1), running_mean, running_var, momentum, eps,
                     stream);
  } else {
    const torch::Tensor operand =
        prologue ? NormRelu(x, *gamma, *beta, *mean_in, *invstd_in, stream) : x;
    y = Conv(operand, w, stride, padding).contiguous(at::MemoryFormat::ChannelsLast);
    stats = StatisticsOf(y, running_mean, running_var, momentum, eps);
  }
  return {y, stats.mean, stats.invstd};
}

// conv(x) with the batch statistics of its output.
class ConvStatsFunction : public torch::autograd::Function<ConvStatsFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& running_mean, const torch::Tensor& running_var,
                               int64_t stride, int64_t padding, double momentum, double eps) {
    variable_list out =
        ForwardWithStatistics(x, w, nullptr, nullptr, nullptr, nullptr, running_mean, running_var,
                              stride, padding, momentum, eps);
    ctx->mark_non_differentiable({out[1], out[2]});
    ctx->save_for_backward({x, w});
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result(8);
    if (!grads[0].defined()) return result;
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor dy =
        grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    auto [dx, dw] =
        ConvBackward(dy, x, w, ctx->saved_data["stride"].toInt(),
                     ctx->saved_data["padding"].toInt(), ctx->needs_input_grad(0), true);
    result[0] = dx;
    result[1] = dw;
    return result;
  }
};

// conv(relu(bn(x))) with the batch statistics of its output; bn's statistics (mean_in,
// invstd_in) are those of x, so its backward is batch norm's full one.
class NormReluConvStatsFunction : public torch::autograd::Function<NormReluConvStatsFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& gamma, const torch::Tensor& beta,
                               const torch::Tensor& mean_in, const torch::Tensor& invstd_in,
                               const torch::Tensor& w, const torch::Tensor& running_mean,
                               const torch::Tensor& running_var, int64_t stride, int64_t padding,
                               double momentum, double eps) {
    variable_list out =
        ForwardWithStatistics(x, w, &gamma, &beta, &mean_in, &invstd_in, running_mean, running_var,
                              stride, padding, momentum, eps);
    ctx->mark_non_differentiable({out[1], out[2]});
    ctx->save_for_backward({x, gamma, beta, mean_in, invstd_in, w});
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result(12);
    if (!grads[0].defined()) return result;
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &gamma = saved[1], &beta = saved[2], &mean = saved[3],
                        &invstd = saved[4], &w = saved[5];
    const int64_t stride = ctx->saved_data["stride"].toInt();
    const int64_t padding = ctx->saved_data["padding"].toInt();
    c10::cuda::CUDAGuard guard(x.device());
    cudaStream_t stream = CurrentStream(x);
    const torch::Tensor dy =
        grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    const ConvShape shape = ShapeOf(x, w, stride, padding);
    const ElementType type = ElementTypeOf(x.scalar_type());
    torch::Tensor a;  // relu(bn(x)) written out, for the pieces that run unfused
    auto operand = [&]() -> const torch::Tensor& {
      if (!a.defined()) a = NormRelu(x, gamma, beta, mean, invstd, stream);
      return a;
    };

    torch::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
    torch::Tensor dgamma = at::empty_like(gamma), dbeta = at::empty_like(gamma);
    if (std::optional<ConvBnPlanInfo> plan = PlanOf(ConvBnGraph::kDgradReluNormWeight, shape)) {
      torch::Tensor g = at::empty_like(x, at::MemoryFormat::ChannelsLast);
      torch::Tensor eq = at::empty({3, x.size(1)}, gamma.options());
      ConvBnTensors t;
      t.dy = dy.data_ptr();
      t.w = w.data_ptr();
      t.x = x.data_ptr();
      t.mean = Floats(mean);
      t.invstd = Floats(invstd);
      t.gamma = Floats(gamma);
      t.beta = Floats(beta);
      t.g = g.data_ptr();
      t.dgamma = Floats(dgamma);
      t.dbeta = Floats(dbeta);
      t.eq_scale_dy = eq[0].data_ptr<float>();
      t.eq_scale_x = eq[1].data_ptr<float>();
      t.eq_bias = eq[2].data_ptr<float>();
      torch::Tensor workspace = Workspace(*plan, x);
      Check(RunConvBnGraph(ConvBnGraph::kDgradReluNormWeight, shape, t, workspace.data_ptr(),
                           stream));
      Check(LaunchConvBnDataGradient(g.data_ptr(), x.data_ptr(), type, RowsOf(x), Floats(mean),
                                     Floats(invstd), Floats(gamma), Floats(dgamma), Floats(dbeta),
                                     dx.data_ptr(), stream),
            "batch norm data gradient");
    } else {
      const torch::Tensor& relu_out = operand();
      torch::Tensor da = std::get<0>(ConvBackward(dy, relu_out, w, stride, padding, true, false))
                             .contiguous(at::MemoryFormat::ChannelsLast);
      torch::Tensor scratch = at::empty({BatchNormScratchFloats(RowsOf(x))}, gamma.options());
      Check(
          LaunchBatchNormBackward(da.data_ptr(), relu_out.data_ptr(), x.data_ptr(), type, RowsOf(x),
                                  Floats(mean), Floats(invstd), Floats(gamma),
                                  /*relu=*/true, /*batch_statistics=*/true, dx.data_ptr(), nullptr,
                                  Floats(dgamma), Floats(dbeta), Floats(scratch), stream),
          "batch norm backward");
    }

    torch::Tensor dw;
    if (std::optional<ConvBnPlanInfo> plan = PlanOf(ConvBnGraph::kNormReluWgrad, shape)) {
      dw = at::empty_like(w, at::MemoryFormat::ChannelsLast);
      auto [scale, shift] = ScaleShift(gamma, beta, mean, invstd, plan->scale_type, stream);
      ConvBnTensors t;
      t.x = x.data_ptr();
      t.dy = dy.data_ptr();
      t.scale = scale.data_ptr();
      t.shift = shift.data_ptr();
      t.dw = dw.data_ptr();
      torch::Tensor workspace = Workspace(*plan, x);
      Check(RunConvBnGraph(ConvBnGraph::kNormReluWgrad, shape, t, workspace.data_ptr(), stream));
    } else {
      dw = std::get<1>(ConvBackward(dy, operand(), w, stride, padding, false, true));
    }
    result[0] = dx;
    result[1] = dgamma;
    result[2] = dbeta;
    result[5] = dw;
    return result;
  }
};

// The shared body of the two functions below: act(bn(x) (+ residual)) with bn's batch
// statistics given (those of x).
torch::Tensor FinishForward(AutogradContext* ctx, const torch::Tensor& x,
                            const torch::Tensor& residual, const torch::Tensor& gamma,
                            const torch::Tensor& beta, const torch::Tensor& mean,
                            const torch::Tensor& invstd, bool relu) {
  c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = CurrentStream(x);
  auto [scale, unused_shift] = ScaleShift(gamma, beta, mean, invstd, ElementType::kFloat32, stream);
  torch::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  Check(LaunchBatchNormApply(x.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr,
                             y.data_ptr(), ElementTypeOf(x.scalar_type()), RowsOf(x), Floats(mean),
                             Floats(scale), Floats(beta), relu, stream),
        "batch norm apply");
  ctx->save_for_backward({x, relu ? y : torch::Tensor(), gamma, mean, invstd});
  ctx->saved_data["relu"] = relu;
  ctx->saved_data["residual"] = residual.defined();
  return y;
}

// {dx, dresidual (undefined without a residual), dgamma, dbeta}.
variable_list FinishBackward(AutogradContext* ctx, const torch::Tensor& grad) {
  if (!grad.defined()) return variable_list(4);
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor &x = saved[0], &y = saved[1], &gamma = saved[2], &mean = saved[3],
                      &invstd = saved[4];
  const bool relu = ctx->saved_data["relu"].toBool();
  const bool has_residual = ctx->saved_data["residual"].toBool();
  c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor dy = grad.to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
  torch::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  torch::Tensor dresidual;
  if (has_residual) dresidual = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  torch::Tensor dgamma = at::empty_like(gamma), dbeta = at::empty_like(gamma);
  torch::Tensor scratch = at::empty({BatchNormScratchFloats(RowsOf(x))}, gamma.options());
  Check(LaunchBatchNormBackward(dy.data_ptr(), relu ? y.data_ptr() : dy.data_ptr(), x.data_ptr(),
                                ElementTypeOf(x.scalar_type()), RowsOf(x), Floats(mean),
                                Floats(invstd), Floats(gamma), relu, /*batch_statistics=*/true,
                                dx.data_ptr(), has_residual ? dresidual.data_ptr() : nullptr,
                                Floats(dgamma), Floats(dbeta), Floats(scratch), CurrentStream(x)),
        "batch norm backward");
  return {dx, dresidual, dgamma, dbeta};
}

class FinishFunction : public torch::autograd::Function<FinishFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& gamma, const torch::Tensor& beta,
                               const torch::Tensor& mean, const torch::Tensor& invstd, bool relu) {
    return FinishForward(ctx, x, {}, gamma, beta, mean, invstd, relu);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list g = FinishBackward(ctx, grads[0]);
    return {g[0], g[2], g[3], {}, {}, {}};
  }
};

class FinishAddReluFunction : public torch::autograd::Function<FinishAddReluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& residual, const torch::Tensor& gamma,
                               const torch::Tensor& beta, const torch::Tensor& mean,
                               const torch::Tensor& invstd) {
    return FinishForward(ctx, x, residual, gamma, beta, mean, invstd, /*relu=*/true);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list g = FinishBackward(ctx, grads[0]);
    return {g[0], g[1], g[2], g[3], {}, {}};
  }
};

// The activations' type: autocast's where it is on, else x's own.
at::ScalarType ComputeType(const torch::Tensor& x) {
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) {
    return at::autocast::get_autocast_dtype(at::kCUDA);
  }
  return x.scalar_type();
}

// The side effects of bn's forward in training (num_batches_tracked counts the batch), and
// the momentum as torch::nn::BatchNorm2d derives it.
double CountBatch(torch::nn::BatchNorm2dImpl& bn) {
  c10::NoGradGuard no_grad;
  bn.num_batches_tracked += 1;
  if (!bn.options.momentum().has_value()) return 1.0 / bn.num_batches_tracked.item<double>();
  return *bn.options.momentum();
}

// x and conv's weight in the compute type, channels_last (differentiable casts).
std::pair<torch::Tensor, torch::Tensor> Operands(const torch::Tensor& x,
                                                 const torch::nn::Conv2dImpl& conv) {
  const at::ScalarType type = ComputeType(x);
  return {x.to(type).contiguous(at::MemoryFormat::ChannelsLast),
          conv.weight.to(type).contiguous(at::MemoryFormat::ChannelsLast)};
}

int64_t PaddingOf(const torch::nn::Conv2dImpl& conv) {
  return (*std::get_if<torch::ExpandingArray<2>>(&conv.options.padding()))->at(0);
}

}  // namespace

void SetConvBnGraphsEnabledForTesting(bool enabled) { graphs_disabled.store(!enabled); }

bool ConvBnFusionApplies(const torch::nn::Conv2dImpl& conv, const torch::nn::BatchNorm2dImpl& bn,
                         const torch::Tensor& x) {
  if (!x.defined() || !x.is_cuda() || x.dim() != 4 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast) || x.numel() == 0) {
    return false;
  }
  const at::ScalarType type = ComputeType(x);
  if (type != at::kBFloat16 && type != at::kHalf) return false;
  if (!bn.is_training() || !bn.options.affine() || !bn.options.track_running_stats()) return false;
  if (SyncBatchNormGroup() != nullptr) return false;  // statistics over every rank's batch
  const auto& o = conv.options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  if (padding == nullptr || (**padding)[0] != (**padding)[1]) return false;
  if (o.groups() != 1 || o.bias() || (*o.dilation())[0] != 1 || (*o.dilation())[1] != 1 ||
      (*o.stride())[0] != (*o.stride())[1] || (*o.kernel_size())[0] != (*o.kernel_size())[1] ||
      o.padding_mode().index() != 0 /* kZeros */) {
    return false;
  }
  if (x.size(1) != o.in_channels() || bn.options.num_features() != o.out_channels()) return false;
  const int64_t k = (*o.kernel_size())[0], s = (*o.stride())[0], p = (**padding)[0];
  const int64_t out_h = (x.size(2) + 2 * p - k) / s + 1, out_w = (x.size(3) + 2 * p - k) / s + 1;
  if (out_h <= 0 || out_w <= 0 || x.size(0) * out_h * out_w < 2) return false;
  for (const torch::Tensor* t : {&bn.weight, &bn.bias, &bn.running_mean, &bn.running_var}) {
    if (!t->defined() || t->scalar_type() != at::kFloat || t->device() != x.device()) return false;
  }
  return true;
}

PendingBatchNorm ConvWithBatchStatistics(torch::nn::Conv2dImpl& conv,
                                         torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
  TORCH_CHECK(ConvBnFusionApplies(conv, bn, x),
              "ConvWithBatchStatistics: conv + batch norm fusion does not apply");
  const double momentum = CountBatch(bn);
  auto [input, w] = Operands(x, conv);
  variable_list out = ConvStatsFunction::apply(input, w, bn.running_mean, bn.running_var,
                                               (*conv.options.stride())[0], PaddingOf(conv),
                                               momentum, bn.options.eps());
  return {out[0], out[1], out[2], &bn};
}

PendingBatchNorm NormReluConvWithBatchStatistics(const PendingBatchNorm& in,
                                                 torch::nn::Conv2dImpl& conv,
                                                 torch::nn::BatchNorm2dImpl& out_bn) {
  TORCH_CHECK(in.bn != nullptr, "NormReluConvWithBatchStatistics: no batch norm to apply");
  TORCH_CHECK(ConvBnFusionApplies(conv, out_bn, in.y),
              "NormReluConvWithBatchStatistics: conv + batch norm fusion does not apply");
  const double momentum = CountBatch(out_bn);
  auto [input, w] = Operands(in.y, conv);
  variable_list out = NormReluConvStatsFunction::apply(
      input, in.bn->weight, in.bn->bias, in.mean, in.invstd, w, out_bn.running_mean,
      out_bn.running_var, (*conv.options.stride())[0], PaddingOf(conv), momentum,
      out_bn.options.eps());
  return {out[0], out[1], out[2], &out_bn};
}

torch::Tensor FinishBatchNorm(const PendingBatchNorm& in, const torch::Tensor& residual,
                              bool relu) {
  TORCH_CHECK(in.bn != nullptr, "FinishBatchNorm: no batch norm to apply");
  if (residual.defined()) {
    TORCH_CHECK(relu, "FinishBatchNorm: a residual comes with the ReLU");
    const torch::Tensor r =
        residual.to(in.y.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    TORCH_CHECK(r.sizes() == in.y.sizes(), "FinishBatchNorm: residual of shape ", r.sizes(),
                " for an output of shape ", in.y.sizes());
    return FinishAddReluFunction::apply(in.y, r, in.bn->weight, in.bn->bias, in.mean, in.invstd);
  }
  return FinishFunction::apply(in.y, in.bn->weight, in.bn->bias, in.mean, in.invstd, relu);
}

}  // namespace stoker::trainer
