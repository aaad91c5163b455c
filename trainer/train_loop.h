// TrainLoop: one rank's training run. It pulls batches from its data-service ring, runs
// forward and backward, averages gradients with the other ranks, and steps the optimizer.
#ifndef STOKER_TRAINER_TRAIN_LOOP_H_
#define STOKER_TRAINER_TRAIN_LOOP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/communicator.h"
#include "trainer/rank_setup.h"

namespace stoker::trainer {

struct TrainerOptions {
  std::string data_socket;    // the node's data service
  std::string model = "small_cnn";
  int num_classes = 10;
  int image_size = 32;
  int batch_size = 32;        // per rank
  int epochs = 1;
  int64_t max_steps_per_epoch = 0;  // 0: the whole epoch
  double learning_rate = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  uint64_t seed = 0;          // base seed: weights, sampler order, augmentation
  size_t bucket_bytes = 25u << 20;
  int ring_slots = 4;
  int log_every = 10;         // steps between progress lines on rank 0
  absl::Duration data_timeout = absl::Seconds(120);
  std::string final_params_out;  // if set, each rank writes its parameters to <path>.rank<r>
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float stddev[3] = {0.229f, 0.224f, 0.225f};
};

// Checks option values; InvalidArgument names the flag at fault.
absl::Status ValidateOptions(const TrainerOptions& options);

// Runs the whole training. Must be called on every rank with the same options.
absl::Status RunTraining(const TrainerOptions& options, const RankInfo& rank,
                         Communicator& communicator);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAIN_LOOP_H_
