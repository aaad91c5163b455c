#include "trainer/train_step.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/autocast_mode.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace stoker::trainer {

at::Tensor ClipGradNorm(std::vector<at::Tensor>& grads, double max_norm) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  const at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  // As torch.nn.utils.clip_grad_norm_: multiply by min(1, max_norm / (total + 1e-6)).
  const at::Tensor coefficient = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  at::_foreach_mul_(grads, coefficient);
  return total;
}

TrainStep::TrainStep(ImageClassifier& model, GradBuckets& buckets, FusedOptimizer& optimizer,
                     LossScaler& scaler, std::vector<at::Tensor> parameters,
                     const TrainStepOptions& options)
    : model_(model),
      buckets_(buckets),
      optimizer_(optimizer),
      scaler_(scaler),
      parameters_(std::move(parameters)),
      options_(options) {}

void TrainStep::Begin(int micro_batches) {
  micro_batches_ = micro_batches;
  done_ = 0;
  buckets_.ZeroGrad();
}

absl::StatusOr<at::Tensor> TrainStep::MicroBatch(const at::Tensor& images, const at::Tensor& labels,
                                                 StepProfiler* profiler) {
  if (done_ >= micro_batches_) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainStep: micro-batch ", done_ + 1, " of a step announced with ", micro_batches_));
  }
  const bool last = done_ + 1 == micro_batches_;
  buckets_.BeginStep(/*reduce=*/last);
  const std::string micro_batch = absl::StrCat(" of micro-batch ", done_ + 1, " of ", micro_batches_);
  ASSIGN_OR_RETURN(at::Tensor loss, TorchCall(absl::StrCat("train step: forward", micro_batch), [&] {
    at::Tensor loss = at::cross_entropy_loss(model_.forward(images), labels, /*weight=*/{},
                                             at::Reduction::Mean, /*ignore_index=*/-100,
                                             options_.label_smoothing);
    if (options_.autocast) at::autocast::clear_cache();
    return loss;
  }));
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kForward));
  RETURN_IF_ERROR(TorchCall(absl::StrCat("train step: backward", micro_batch), [&] {
    const at::Tensor objective = micro_batches_ > 1 ? loss / micro_batches_ : loss;
    scaler_.Scale(objective).backward();
  }));
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kBackward));
  RETURN_IF_ERROR(buckets_.FinishStep());
  if (last && profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kAllreduceWait));
  ++done_;
  return loss.detach();
}

absl::Status TrainStep::Finish(double learning_rate, StepProfiler* profiler) {
  if (done_ != micro_batches_) {
    return absl::FailedPreconditionError(absl::StrCat("TrainStep: Finish after ", done_, " of ",
                                                      micro_batches_, " micro-batches"));
  }
  RETURN_IF_ERROR(TorchCall("train step: unscale, clip and optimizer step", [&]() -> absl::Status {
    std::vector<at::Tensor> grads;
    grads.reserve(parameters_.size());
    for (const at::Tensor& p : parameters_) grads.push_back(p.grad());
    optimizer_.set_learning_rate(learning_rate);
    skipped_ = false;
    if (scaler_.enabled()) {
      // Every rank holds the same averaged gradients, so every rank skips the same steps.
      RETURN_IF_ERROR(scaler_.Unscale(grads));
      if (options_.clip_grad_norm > 0) grad_norm_ = ClipGradNorm(grads, options_.clip_grad_norm);
      RETURN_IF_ERROR(scaler_.Step([&] {
        optimizer_.Step();
        return absl::OkStatus();
      }));
      skipped_ = scaler_.StepSkipped();
      return scaler_.Update();
    }
    if (options_.clip_grad_norm > 0) grad_norm_ = ClipGradNorm(grads, options_.clip_grad_norm);
    optimizer_.Step();
    return absl::OkStatus();
  }));
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kOptimizer));
  return absl::OkStatus();
}

}  // namespace stoker::trainer
