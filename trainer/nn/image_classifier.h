// ImageClassifier: what every model Stoker trains is. Float NCHW images (channels_last
// layout or not) in, logits [N, classes] out.
#ifndef STOKER_TRAINER_NN_IMAGE_CLASSIFIER_H_
#define STOKER_TRAINER_NN_IMAGE_CLASSIFIER_H_

#include <torch/nn/module.h>

#include <cstdint>

namespace stoker::trainer {

class ImageClassifier : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  virtual torch::Tensor forward(torch::Tensor images) = 0;

  // Seeds the model's random ops (dropout) for the forward passes that follow; the
  // training loop calls it before each optimizer step with a seed of (run seed, rank,
  // step). Models without random ops ignore it.
  virtual void SetRandomSeed(uint64_t seed) { (void)seed; }
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_IMAGE_CLASSIFIER_H_
