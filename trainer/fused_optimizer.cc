#include "trainer/fused_optimizer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    std::vector<at::Tensor> parameters, const OptimizerOptions& options) {
  if (options.kind != "sgd" && options.kind != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer=", options.kind, ": use sgd or adamw"));
  }
  if (!(options.learning_rate > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr=", options.learning_rate, ": must be > 0"));
  }
  if (options.weight_decay < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--weight_decay=", options.weight_decay, ": must be >= 0"));
  }
  if (options.momentum < 0 || options.momentum >= 1) {
    return absl::InvalidArgumentError(absl::StrCat("--momentum=", options.momentum, ": must be in [0, 1)"));
  }
  if (options.nesterov && options.momentum == 0) {
    return absl::InvalidArgumentError("--nesterov needs --momentum > 0");
  }
  return std::unique_ptr<FusedOptimizer>(new FusedOptimizer(std::move(parameters), options));
}

FusedOptimizer::FusedOptimizer(std::vector<at::Tensor> parameters, const OptimizerOptions& options)
    : parameters_(std::move(parameters)), options_(options) {
  for (const at::Tensor& p : parameters_) {
    if (options_.kind == "adamw") {
      exp_avg_.push_back(at::zeros_like(p));
      exp_avg_sq_.push_back(at::zeros_like(p));
      steps_.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
    } else if (options_.momentum > 0) {
      momentum_.push_back(at::zeros_like(p));
    }
  }
}

void FusedOptimizer::Step() {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  grads.reserve(parameters_.size());
  for (const at::Tensor& p : parameters_) grads.push_back(p.grad());
  if (options_.kind == "adamw") {
    // The kernel reads the step counts for bias correction; the caller advances them.
    at::_foreach_add_(steps_, 1);
    at::_fused_adamw_(parameters_, grads, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps_,
                      options_.learning_rate, options_.beta1, options_.beta2,
                      options_.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    // With momentum, the first step sets each buffer to the gradient (torch.optim.SGD).
    at::_fused_sgd_(parameters_, grads, momentum_, options_.weight_decay, options_.momentum,
                    options_.learning_rate, /*dampening=*/0.0, options_.nesterov,
                    /*maximize=*/false, /*is_first_step=*/first_step_);
  }
  first_step_ = false;
}

}  // namespace stoker::trainer
