#include "trainer/nn/random_batch_norm.h"

#include <torch/torch.h>

namespace stoker::trainer {

torch::nn::BatchNorm2d RandomBatchNorm(int64_t channels) {
  torch::nn::BatchNorm2d bn(channels);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.normal_(0, 0.1);
  bn->running_var.uniform_(0.5, 1.5);
  return bn;
}

}  // namespace stoker::trainer
