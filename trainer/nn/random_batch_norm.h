// Test support: a batch norm module whose parameters and running statistics are not their
// initial values, so that tests of batch norm see every term of the formula.
#ifndef STOKER_TRAINER_NN_RANDOM_BATCH_NORM_H_
#define STOKER_TRAINER_NN_RANDOM_BATCH_NORM_H_

#include <torch/nn/modules/batchnorm.h>

#include <cstdint>

namespace stoker::trainer {

// A BatchNorm2d of `channels` in fp32 on the CPU: weight and running variance uniform in
// [0.5, 1.5], bias uniform in [-0.5, 0.5], running mean normal (0, 0.1), drawn from
// libtorch's default generator.
torch::nn::BatchNorm2d RandomBatchNorm(int64_t channels);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_RANDOM_BATCH_NORM_H_
