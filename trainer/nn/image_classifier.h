// ImageClassifier: what every model Stoker trains is. Float NCHW images (channels_last
// layout or not) in, logits [N, classes] out.
#ifndef STOKER_TRAINER_NN_IMAGE_CLASSIFIER_H_
#define STOKER_TRAINER_NN_IMAGE_CLASSIFIER_H_

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

#include "trainer/nn/fp8_state.h"

namespace stoker::trainer {

class ImageClassifier : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  virtual torch::Tensor forward(torch::Tensor images) = 0;

  // Seeds the model's random ops (dropout) for the forward passes that follow; the
  // training loop calls it before each optimizer step with a seed of (run seed, rank,
  // step). Models without random ops ignore it.
  virtual void SetRandomSeed(uint64_t seed) { (void)seed; }

  // The generators of the model's random ops on CUDA devices, besides each device's default
  // one (a captured CUDA graph registers them: each replay draws from their current seed).
  // Only those made so far, by forward passes on the device.
  virtual std::vector<at::Generator> DeviceGenerators() { return {}; }

  // The scaling state of the model's FP8 linear layers (--precision=fp8), in a fixed order,
  // their names unique and stable for the same model: training state that checkpoints save
  // and restore, never part of the state dict (Note [FP8 scaling state in checkpoints],
  // trainer/nn/fp8_state.h). Empty for a model without FP8 layers.
  virtual std::vector<c10::intrusive_ptr<Fp8LinearState>> Fp8States() { return {}; }
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_IMAGE_CLASSIFIER_H_
