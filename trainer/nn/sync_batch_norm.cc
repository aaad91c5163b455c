#include "trainer/nn/sync_batch_norm.h"

#include <torch/autograd.h>

#include <atomic>
#include <vector>

namespace stoker::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<BatchNormGroup*> sync_group{nullptr};

// The shape that broadcasts a per-channel vector over x [N, C, ...].
std::vector<int64_t> ChannelShape(const torch::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = x.size(1);
  return shape;
}

// Every dimension but the channels'.
std::vector<int64_t> ReducedDims(const torch::Tensor& x) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// Sums `t` (fp32, contiguous) over the ranks of `group`, in place.
void AllReduceSum(torch::Tensor& t, BatchNormGroup& group) {
  const absl::Status reduced = group.AllReduceSum(t);
  TORCH_CHECK(reduced.ok(), "sync batch norm allreduce: ", reduced.ToString());
}

class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps, BatchNormGroup* group) {
    const int64_t channels = x.size(1);
    const std::vector<int64_t> dims = ReducedDims(x);
    const std::vector<int64_t> shape = ChannelShape(x);
    const torch::Tensor xf = x.to(torch::kFloat);
    // [sum x | sum x*x | count], one allreduce.
    torch::Tensor stats =
        torch::cat({xf.sum(dims), xf.square().sum(dims),
                    torch::full({1}, static_cast<double>(x.numel() / channels), xf.options())})
            .contiguous();
    AllReduceSum(stats, *group);
    const torch::Tensor count = stats.narrow(0, 2 * channels, 1);
    const torch::Tensor mean = stats.narrow(0, 0, channels) / count;
    const torch::Tensor var =
        (stats.narrow(0, channels, channels) / count - mean.square()).clamp_min(0);
    const torch::Tensor invstd = (var + eps).rsqrt();
    if (running_mean.defined()) {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean, momentum);
      running_var.mul_(1 - momentum).add_(var * count / (count - 1), momentum);
    }
    const torch::Tensor xhat = (xf - mean.view(shape)) * invstd.view(shape);
    torch::Tensor y = xhat;
    if (weight.defined()) y = y * weight.to(torch::kFloat).view(shape);
    if (bias.defined()) y = y + bias.to(torch::kFloat).view(shape);
    ctx->save_for_backward({x, weight, bias, mean, invstd, count});
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return y.to(x.scalar_type()).contiguous(x.suggest_memory_format());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& bias = saved[2];
    const torch::Tensor& mean = saved[3];
    const torch::Tensor& invstd = saved[4];
    const torch::Tensor& count = saved[5];
    auto* group = reinterpret_cast<BatchNormGroup*>(ctx->saved_data["group"].toInt());
    const std::vector<int64_t> dims = ReducedDims(x);
    const std::vector<int64_t> shape = ChannelShape(x);
    const int64_t channels = x.size(1);

    const torch::Tensor dy = grads[0].to(torch::kFloat);
    const torch::Tensor xhat = (x.to(torch::kFloat) - mean.view(shape)) * invstd.view(shape);
    const torch::Tensor local_dy = dy.sum(dims);
    const torch::Tensor local_dy_xhat = (dy * xhat).sum(dims);
    torch::Tensor sums = torch::cat({local_dy, local_dy_xhat}).contiguous();
    AllReduceSum(sums, *group);
    const torch::Tensor mean_dy = sums.narrow(0, 0, channels) / count;
    const torch::Tensor mean_dy_xhat = sums.narrow(0, channels, channels) / count;
    torch::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight.to(torch::kFloat);
    const torch::Tensor dx =
        (dy - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape)) * scale.view(shape);

    torch::Tensor grad_weight, grad_bias;
    if (weight.defined()) grad_weight = local_dy_xhat.to(weight.scalar_type());
    if (bias.defined()) grad_bias = local_dy.to(bias.scalar_type());
    return {dx.to(x.scalar_type()).contiguous(x.suggest_memory_format()),
            grad_weight,
            grad_bias,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor SyncBatchNorm(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, const torch::Tensor& running_mean,
                            const torch::Tensor& running_var, double momentum, double eps,
                            BatchNormGroup& group) {
  TORCH_CHECK(x.dim() >= 2, "sync batch norm: the input has no channel dimension");
  return SyncBatchNormFunction::apply(x, weight, bias, running_mean, running_var, momentum, eps,
                                      &group);
}

void SetSyncBatchNormGroup(BatchNormGroup* group) { sync_group.store(group); }

BatchNormGroup* SyncBatchNormGroup() { return sync_group.load(); }

}  // namespace stoker::trainer
