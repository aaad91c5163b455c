#include "trainer/optim/fused_optimizer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

#include <optional>

#include "common/flag_value.h"
#include "common/torch_status.h"

namespace stoker::trainer {

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    std::vector<at::Tensor> parameters, const OptimizerOptions& options) {
  std::vector<ParameterGroup> groups(1);
  groups[0].parameters = std::move(parameters);
  groups[0].weight_decay = options.weight_decay;
  return Create(std::move(groups), options);
}

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    std::vector<ParameterGroup> groups, const OptimizerOptions& options) {
  if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  for (const ParameterGroup& group : groups) {
    if (group.weight_decay < 0) {
      return FlagValueError("weight_decay", group.weight_decay, "must be >= 0");
    }
  }
  return TorchCall("optimizer: allocating its state", [&] {
    return std::unique_ptr<FusedOptimizer>(new FusedOptimizer(std::move(groups), options));
  });
}

FusedOptimizer::FusedOptimizer(std::vector<ParameterGroup> groups, const OptimizerOptions& options)
    : options_(options) {
  for (ParameterGroup& given : groups) {
    if (given.parameters.empty()) continue;
    Group group;
    group.parameters = std::move(given.parameters);
    group.weight_decay = given.weight_decay;
    for (const at::Tensor& p : group.parameters) {
      if (options_.kind == OptimizerKind::kAdamW) {
        group.exp_avg.push_back(at::zeros_like(p));
        group.exp_avg_sq.push_back(at::zeros_like(p));
        group.steps.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
      } else if (options_.momentum > 0) {
        group.momentum.push_back(at::zeros_like(p));
      }
    }
    groups_.push_back(std::move(group));
  }
}

void FusedOptimizer::KeepLearningRateOnDevice() {
  const at::TensorOptions on_device =
      groups_.front().parameters.front().options().dtype(at::kFloat);
  learning_rate_ = at::full({}, options_.learning_rate, on_device);
  skipped_on_device_ = at::zeros({}, on_device);
}

void FusedOptimizer::set_learning_rate(double learning_rate) {
  options_.learning_rate = learning_rate;
  if (learning_rate_.defined()) learning_rate_.fill_(learning_rate);
}

int64_t FusedOptimizer::steps_taken() const {
  if (!skipped_on_device_.defined()) return steps_taken_;
  return steps_taken_ - static_cast<int64_t>(skipped_on_device_.item<float>());
}

void FusedOptimizer::set_steps_taken(int64_t steps) {
  steps_taken_ = steps;
  if (skipped_on_device_.defined()) skipped_on_device_.zero_();
}

void FusedOptimizer::Step() { StepGroups(nullptr); }

void FusedOptimizer::Step(const at::Tensor& found_inf) {
  if (!skipped_on_device_.defined()) skipped_on_device_ = at::zeros({}, found_inf.options());
  StepGroups(&found_inf);
}

void FusedOptimizer::StepGroups(const at::Tensor* found_inf) {
  c10::NoGradGuard no_grad;
  std::optional<at::Tensor> skip;
  if (found_inf != nullptr) skip = *found_inf;
  for (Group& group : groups_) {
    std::vector<at::Tensor> grads;
    grads.reserve(group.parameters.size());
    for (const at::Tensor& p : group.parameters) grads.push_back(p.grad());
    if (options_.kind == OptimizerKind::kAdamW) {
      // The kernel reads the step counts for bias correction; the caller advances them.
      // A step skipped on the device takes its count back (as torch.optim does).
      at::_foreach_add_(group.steps, 1);
      if (learning_rate_.defined()) {
        at::_fused_adamw_(group.parameters, grads, group.exp_avg, group.exp_avg_sq,
                          /*max_exp_avg_sqs=*/{}, group.steps, learning_rate_, options_.beta1,
                          options_.beta2, group.weight_decay, options_.eps, /*amsgrad=*/false,
                          /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
      } else {
        at::_fused_adamw_(group.parameters, grads, group.exp_avg, group.exp_avg_sq,
                          /*max_exp_avg_sqs=*/{}, group.steps, options_.learning_rate,
                          options_.beta1, options_.beta2, group.weight_decay, options_.eps,
                          /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
      }
      if (skip.has_value()) {
        at::_foreach_sub_(group.steps, std::vector<at::Tensor>(group.steps.size(), *skip));
      }
    } else if (learning_rate_.defined()) {
      // With momentum, the first step sets each buffer to the gradient (torch.optim.SGD).
      at::_fused_sgd_(group.parameters, grads, group.momentum, group.weight_decay,
                      options_.momentum, learning_rate_, /*dampening=*/0.0, options_.nesterov,
                      /*maximize=*/false, /*is_first_step=*/steps_taken_ == 0,
                      /*grad_scale=*/std::nullopt, skip);
    } else {
      at::_fused_sgd_(group.parameters, grads, group.momentum, group.weight_decay,
                      options_.momentum, options_.learning_rate, /*dampening=*/0.0,
                      options_.nesterov, /*maximize=*/false, /*is_first_step=*/steps_taken_ == 0,
                      /*grad_scale=*/std::nullopt, skip);
    }
  }
  if (skip.has_value()) skipped_on_device_.add_(*skip);
  ++steps_taken_;
}

std::vector<std::vector<std::pair<std::string, at::Tensor>>> FusedOptimizer::StateTensors() const {
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> state;
  for (const Group& group : groups_) {
    for (size_t i = 0; i < group.parameters.size(); ++i) {
      std::vector<std::pair<std::string, at::Tensor>> entry;
      if (options_.kind == OptimizerKind::kAdamW) {
        entry = {{"exp_avg", group.exp_avg[i]},
                 {"exp_avg_sq", group.exp_avg_sq[i]},
                 {"step", group.steps[i]}};
      } else if (options_.momentum > 0) {
        entry = {{"momentum_buffer", group.momentum[i]}};
      }
      state.push_back(std::move(entry));
    }
  }
  return state;
}

}  // namespace stoker::trainer
