// FusedOptimizer: SGD (momentum, Nesterov, weight decay) and AdamW where each step is one
// multi-tensor kernel per parameter group, device and dtype (ATen's _fused_sgd_ and _fused_adamw_,
// what torch.optim runs with fused=True) instead of several small kernels per parameter.
#ifndef STOKER_TRAINER_OPTIM_FUSED_OPTIMIZER_H_
#define STOKER_TRAINER_OPTIM_FUSED_OPTIMIZER_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/optim/optim_options.h"

namespace stoker::trainer {

// A set of parameters that share a weight decay (torch.optim's param_groups; e.g. biases and
// normalisation parameters without decay).
struct ParameterGroup {
  std::vector<at::Tensor> parameters;
  double weight_decay = 0.0;
};

// Updates the parameters from their .grad in place, with torch.optim.SGD's and
// torch.optim.AdamW's semantics, one fused kernel per parameter group. State (momentum
// buffers, moments, step counts) lives on the parameters' device; Step() only enqueues
// work on the current stream. Owned by the training thread.
//
// Note [Steps a CUDA graph can hold]: after KeepLearningRateOnDevice() the learning rate is
// read from a float32 device tensor (set_learning_rate fills it, an enqueued kernel), and
// Step(found_inf) skips on the device when the loss scaler found an inf or NaN: no value
// the step uses comes from the host, so a captured step replays with the current rate.
class FusedOptimizer {
 public:
  // One group with options.weight_decay. InvalidArgument for an unknown kind or
  // out-of-range hyper-parameters.
  static absl::StatusOr<std::unique_ptr<FusedOptimizer>> Create(std::vector<at::Tensor> parameters,
                                                                const OptimizerOptions& options);
  // Several groups, each with its own weight decay (options.weight_decay is not used).
  static absl::StatusOr<std::unique_ptr<FusedOptimizer>> Create(std::vector<ParameterGroup> groups,
                                                                const OptimizerOptions& options);

  void Step();
  // As Step(), but every update is skipped on the device when `found_inf` (a float32 0-dim
  // tensor on the parameters' device, LossScaler::found_inf()) is 1: parameters, state and
  // AdamW's step counts stay as they were. The skips are counted on the device (in a tensor
  // that KeepLearningRateOnDevice, or else the first such call, allocates).
  void Step(const at::Tensor& found_inf);

  // Note [Steps a CUDA graph can hold]. Call before the first Step.
  void KeepLearningRateOnDevice();

  double learning_rate() const { return options_.learning_rate; }
  // With the rate on the device, also fills its tensor (enqueued on the current stream).
  void set_learning_rate(double learning_rate);
  const OptimizerOptions& options() const { return options_; }

  // The state kept for each parameter, in the order of the groups and their parameters,
  // under torch.optim's state_dict names: "momentum_buffer" (SGD with momentum), or
  // "exp_avg", "exp_avg_sq", "step" (AdamW; step is a float32 scalar). The tensors alias
  // the live state: a checkpoint reads them, a resume copies into them.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> StateTensors() const;

  // Optimizer steps taken (SGD's first step initialises the momentum buffers); steps that
  // Step(found_inf) skipped do not count. A resume sets it with the restored state. Syncs
  // with the device once Step(found_inf) ran.
  int64_t steps_taken() const;
  void set_steps_taken(int64_t steps);
  // A step replayed from a CUDA graph whose capture called Step: its kernels ran again, and
  // the host's count advances as Step's own would (skips are counted on the device, inside
  // the graph).
  void CountReplayedStep() { ++steps_taken_; }

 private:
  struct Group {
    std::vector<at::Tensor> parameters;
    double weight_decay = 0;
    std::vector<at::Tensor> momentum;    // SGD, when momentum > 0
    std::vector<at::Tensor> exp_avg;     // AdamW first moments
    std::vector<at::Tensor> exp_avg_sq;  // AdamW second moments
    std::vector<at::Tensor> steps;       // AdamW step counts (float32 scalars on device)
  };
  FusedOptimizer(std::vector<ParameterGroup> groups, const OptimizerOptions& options);

  void StepGroups(const at::Tensor* found_inf);

  OptimizerOptions options_;
  std::vector<Group> groups_;
  int64_t steps_taken_ = 0;       // including those Step(found_inf) skipped on the device
  at::Tensor learning_rate_;      // float32 0-dim on the device; undefined: host rate
  at::Tensor skipped_on_device_;  // float32 0-dim: steps Step(found_inf) skipped
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_OPTIM_FUSED_OPTIMIZER_H_
