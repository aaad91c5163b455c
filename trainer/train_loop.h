// TrainLoop: one rank's training run. It pulls batches from its data-service ring through
// a BatchFeeder, runs forward (under autocast on the GPU) and backward, averages
// gradients with the other ranks while backward runs, and steps the optimizer.
#ifndef STOKER_TRAINER_TRAIN_LOOP_H_
#define STOKER_TRAINER_TRAIN_LOOP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/communicator.h"
#include "launcher/rank_setup.h"

namespace stoker::trainer {

enum class Precision { kFloat32, kBFloat16, kFloat16 };

struct TrainerOptions {
  std::string data_socket;    // the node's data service; empty with synthetic_input
  std::string model = "small_cnn";
  int num_classes = 10;
  int image_size = 32;
  int batch_size = 32;        // per rank
  int epochs = 1;
  std::string optimizer = "sgd";  // sgd or adamw
  double learning_rate = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  uint64_t seed = 0;          // base seed: weights, sampling order, augmentation
  size_t bucket_bytes = 25u << 20;
  int ring_slots = 4;
  bool train_split = true;    // the training split with augmentation, or the validation split
  // Skip the short last batch of an epoch (DataLoader's drop_last): every step then has
  // the same shape, which cudnn.benchmark needs to tune once and not at each epoch's end.
  bool drop_last_batch = true;
  int log_every = 10;         // steps between progress lines on rank 0
  absl::Duration data_timeout = absl::Seconds(120);
  std::string final_params_out;  // if set, each rank writes its parameters to <path>.rank<r>
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float stddev[3] = {0.229f, 0.224f, 0.225f};

  // GPU path.
  bool use_cuda = false;      // decided by main() from --device and the machine
  int cuda_device = 0;
  Precision precision = Precision::kBFloat16;  // autocast dtype; kFloat32 turns AMP off
  bool channels_last = true;
  bool cudnn_benchmark = true;  // fixed input shapes: let cuDNN pick the fastest kernels
  double init_scale = 65536.0;  // loss scaler (fp16 only)
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  double cache_release_fraction = 0.9;  // release cached blocks past this share of the device

  // Benchmarking: one batch made on the device and reused, no data service (the
  // GPU-bound ceiling). Steps per epoch.
  int synthetic_steps = 0;
  int warmup_steps = 10;      // steps excluded from the throughput figure
  // Benchmarking the input pipeline alone: batches go through the feeder (ring, copy,
  // normalisation) and nothing trains.
  bool data_only = false;
  std::string metrics_out;    // if set, rank 0 writes a JSON summary here at the end
  std::string loss_log;       // if set, rank 0 writes "epoch step loss" for every step here
  // If set, each rank writes "epoch step index..." (the dataset indices of the samples) for
  // every trained batch to <path>.rank<r>: what tests check sampling and seeding with.
  std::string sample_log;
};

// Checks option values; InvalidArgument names the flag at fault.
absl::Status ValidateOptions(const TrainerOptions& options);

// Runs the whole training. Must be called on every rank with the same options.
absl::Status RunTraining(const TrainerOptions& options, const launcher::RankInfo& rank,
                         Communicator& communicator);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAIN_LOOP_H_
