// FusedOptimizer: SGD (momentum, Nesterov, weight decay) and AdamW where each step is one
// multi-tensor kernel per device and dtype (ATen's _fused_sgd_ and _fused_adamw_, what
// torch.optim runs with fused=True) instead of several small kernels per parameter.
#ifndef STOKER_TRAINER_FUSED_OPTIMIZER_H_
#define STOKER_TRAINER_FUSED_OPTIMIZER_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::trainer {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd" or "adamw"
  double learning_rate = 0.1;
  double weight_decay = 0.0;
  // SGD
  double momentum = 0.9;
  bool nesterov = false;
  // AdamW
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// Updates the parameters from their .grad in place, with torch.optim.SGD's and
// torch.optim.AdamW's semantics. State (momentum buffers, moments, step counts) lives on
// the parameters' device; Step() only enqueues work on the current stream. Owned by the
// training thread.
class FusedOptimizer {
 public:
  // InvalidArgument for an unknown kind or out-of-range hyper-parameters.
  static absl::StatusOr<std::unique_ptr<FusedOptimizer>> Create(std::vector<at::Tensor> parameters,
                                                                const OptimizerOptions& options);

  void Step();

  double learning_rate() const { return options_.learning_rate; }
  void set_learning_rate(double learning_rate) { options_.learning_rate = learning_rate; }
  const OptimizerOptions& options() const { return options_; }

 private:
  FusedOptimizer(std::vector<at::Tensor> parameters, const OptimizerOptions& options);

  std::vector<at::Tensor> parameters_;
  OptimizerOptions options_;
  std::vector<at::Tensor> momentum_;      // SGD, when momentum > 0
  std::vector<at::Tensor> exp_avg_;       // AdamW first moments
  std::vector<at::Tensor> exp_avg_sq_;    // AdamW second moments
  std::vector<at::Tensor> steps_;         // AdamW step counts (float32 scalars on device)
  bool first_step_ = true;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_FUSED_OPTIMIZER_H_
