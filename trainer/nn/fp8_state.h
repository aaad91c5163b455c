// The delayed-scaling state of one FP8 linear layer (Note [FP8 linear layers] in
// trainer/nn/fp8_linear.h): its recipe, its device tensor of amax histories and scales, and
// its stable name in checkpoints. Apart from the kernels that use it, so that the model
// interface and checkpoints can hold it without CUDA.
#ifndef STOKER_TRAINER_NN_FP8_STATE_H_
#define STOKER_TRAINER_NN_FP8_STATE_H_

#include <ATen/core/ivalue.h>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker::trainer {

// Delayed scaling's settings.
struct Fp8Recipe {
  int history = 16;             // amaxes kept per tensor role, 1 to 1024 (--fp8_amax_history)
  int margin = 0;               // scale down by 2^margin below what the history's max allows
  bool e4m3_gradients = false;  // output gradients in e4m3 rather than e5m2
};

enum class Fp8Role { kInput = 0, kWeight = 1, kGradOutput = 2 };
inline constexpr int kFp8Roles = 3;

// The scaling state of one linear layer (one call of a program): made at load; its device
// tensor is made by PlaceOn (when the model moves to its device) or else by the first call,
// on that call's device. Used by one program's forward and backward, which never overlap
// (not thread-safe). Held by an intrusive_ptr so that the autograd graph of a step keeps it
// alive until its backward has run.
//
// Note [FP8 scaling state in checkpoints]
// The state is training state: a checkpoint holds each layer's scaling() under
// "fp8/<name>/scaling" (trainer/checkpoint/training_state.h), where `name` is derived from
// the program (the layer's weight, as the state dict names it), so that a checkpoint loads
// into the same model of another run. It is never part of the state dict, so never of the
// exported weights (--export) nor of --init_weights. A restore copies the saved values into
// scaling() in place (its address is kept, so captured CUDA graphs still read it) and marks
// every role primed: the next cast uses the saved scale, as the uninterrupted run's did.
class Fp8LinearState : public torch::CustomClassHolder {
 public:
  // `name`: the state's stable name in checkpoints (empty: a state no checkpoint holds).
  // Throws c10::Error when the recipe is out of its limits.
  explicit Fp8LinearState(Fp8Recipe recipe = {}, std::string name = "");

  const Fp8Recipe& recipe() const { return recipe_; }
  const std::string& name() const { return name_; }
  // The sizes of scaling() for `recipe`: [3 roles, history + 3] (Fp8ScalingRowFloats).
  static std::vector<int64_t> ScalingSizes(const Fp8Recipe& recipe);

  // The role's current scale and amax history ([history], newest first): views of the
  // device state, undefined before it is made.
  torch::Tensor scale(Fp8Role role) const;
  torch::Tensor amax_history(Fp8Role role) const;
  // The whole state, fp32 ScalingSizes(recipe()); undefined before it is made.
  const torch::Tensor& scaling() const { return scaling_; }
  // Forward calls that ran in FP8.
  int64_t fp8_calls() const { return fp8_calls_; }

  // Makes the state on `device` with its initial values (every amax 0, every scale 1, no
  // role primed), or moves the state there when it exists on another device. Throws
  // c10::Error.
  void PlaceOn(const torch::Device& device);
  // Every role primed: scaling() holds values a run computed (Note [FP8 scaling state in
  // checkpoints]). Call after writing them into scaling().
  void MarkPrimed() { primed_ = {true, true, true}; }

  // For Fp8Linear's autograd function: the device state, made on `device` at first use,
  // and whether each role has had its first (amax-only) pass.
  torch::Tensor& DeviceState(const torch::Device& device);
  bool& primed(Fp8Role role) { return primed_[static_cast<int>(role)]; }
  void CountCall() { ++fp8_calls_; }

 private:
  Fp8Recipe recipe_;
  std::string name_;
  torch::Tensor scaling_;  // [3 roles, history + 3] fp32: Fp8ScalingRowFloats
  std::array<bool, kFp8Roles> primed_ = {false, false, false};
  int64_t fp8_calls_ = 0;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_FP8_STATE_H_
