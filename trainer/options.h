// TrainerOptions: everything that describes one training run (model, data, optimizer,
// schedule, validation, checkpoints, outputs), filled from the command line by
// trainer/flags.h, and ValidateOptions, which checks every value before anything starts.
// Free of libtorch, so that option handling is quick to build and test.
#ifndef STOKER_TRAINER_OPTIONS_H_
#define STOKER_TRAINER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::trainer {

enum class Precision { kFloat32, kBFloat16, kFloat16 };

enum class LrSchedule { kConstant, kCosine, kStep };

struct TrainerOptions {
  std::string data_socket;    // the node's data service; empty with synthetic_steps
  std::string model = "small_cnn";
  int num_classes = 10;
  int image_size = 32;
  int batch_size = 32;        // per rank and micro-batch
  int epochs = 1;
  uint64_t seed = 0;          // base seed: weights, sampling order, augmentation
  size_t bucket_bytes = 25u << 20;
  int ring_slots = 4;
  bool train_split = true;    // the training split with augmentation, or the validation split
  // Skip the short last batch of an epoch (DataLoader's drop_last): every step then has
  // the same shape, which cudnn.benchmark needs to tune once and not at each epoch's end.
  bool drop_last_batch = true;
  absl::Duration data_timeout = absl::Seconds(120);
  // Every collective must complete within collective_timeout, or the rank reports the
  // stall and aborts; a rank whose abort has not ended it after collective_abort_grace exits
  // (Note [Collective deadline] in trainer/comm/collective_watchdog.h).
  absl::Duration collective_timeout = absl::Seconds(300);
  absl::Duration collective_abort_grace = absl::Seconds(30);
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float stddev[3] = {0.229f, 0.224f, 0.225f};

  // Optimizer (torch.optim semantics).
  std::string optimizer = "sgd";  // sgd or adamw
  double learning_rate = 0.1;     // peak learning rate (after warm-up)
  double momentum = 0.9;          // SGD
  bool nesterov = false;          // SGD
  double weight_decay = 0.0;
  // Weight decay 0 for biases and normalisation parameters (every parameter of one
  // dimension): two parameter groups, as the usual ImageNet recipes do.
  bool no_decay_bn_bias = false;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;

  // Learning-rate schedule, evaluated at every optimizer step: linear warm-up from
  // lr/warmup_steps to lr over warmup_epochs, then constant, cosine (to lr_min at the end)
  // or step (times lr_step_gamma at each epoch of lr_step_epochs).
  LrSchedule lr_schedule = LrSchedule::kConstant;
  double warmup_epochs = 0;
  std::vector<int> lr_step_epochs;
  double lr_step_gamma = 0.1;
  double lr_min = 0;

  double label_smoothing = 0;   // cross-entropy label smoothing in [0, 1)
  double clip_grad_norm = 0;    // clip the global gradient norm to this (after unscaling); 0: off
  int accumulate = 1;           // micro-batches per optimizer step

  // Validation on the data service's validation split, every val_every epochs and after
  // the last; 0 turns it off.
  int val_every = 1;
  int val_batch_size = 0;       // 0: batch_size

  // Checkpoints, written atomically by rank 0 into checkpoint_dir.
  std::string checkpoint_dir;
  int checkpoint_every_steps = 0;   // optimizer steps between checkpoints; 0: not by steps
  int checkpoint_every_epochs = 1;  // epochs between checkpoints; 0: not by epochs
  int keep_checkpoints = 3;         // the newest K are kept; 0 keeps all
  std::string resume = "auto";      // auto (newest valid in checkpoint_dir), none, or a file
  // Ends this run after this many optimizer steps as a preemption would (checkpoint,
  // exit code kExitStoppedEarly): for time-sliced jobs and tests. 0: off.
  int stop_after_steps = 0;

  // Outputs (rank 0).
  int log_every = 10;               // steps between progress lines
  // auto: redraw the progress line in place when stderr is a terminal or the environment
  // says the job's output goes to one (STOKER_PROGRESS_IN_PLACE=1: under mpirun the ranks'
  // stderr is a pipe); inplace; lines.
  std::string progress = "auto";
  std::string metrics_out;          // JSON summary at the end
  std::string metrics_jsonl;        // one JSON object per progress line, validation and end
  std::string tensorboard_dir;      // TensorBoard event file (scalars)
  std::string loss_log;             // "epoch step loss" for every batch (syncs each step)
  std::string export_path;          // the final state dict as torch.load reads it
  std::string final_params_out;     // each rank: raw parameters to <path>.rank<r> (tests)
  // Each rank writes "epoch step index..." (the dataset indices of the samples) for every
  // trained batch to <path>.rank<r>: what tests check sampling and seeding with.
  std::string sample_log;
  int profile_steps = 0;            // time breakdown over this many steps after warm-up

  // GPU path.
  std::string device = "auto";  // auto, cuda or cpu (--device)
  bool use_cuda = false;      // decided by main() from --device and the machine
  int cuda_device = 0;
  Precision precision = Precision::kBFloat16;  // autocast dtype; kFloat32 turns AMP off
  bool channels_last = true;
  bool cudnn_benchmark = true;  // fixed input shapes: let cuDNN pick the fastest kernels
  // Deterministic cuDNN and ATen algorithms (slower): the same run twice, or a run and its
  // resumed continuation, give the same bits on the same GPUs. The CPU path always does.
  bool deterministic = false;
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
};

// Exit codes of the trainer (and so of mpirun and the launcher), documented in --help and
// the README.
inline constexpr int kExitOk = 0;            // training finished
inline constexpr int kExitError = 1;         // a failure; the message says which
inline constexpr int kExitUsage = 2;         // a bad flag or flag value
inline constexpr int kExitStoppedEarly = 75; // --stop_after_steps reached (checkpoint written)
// Stopped at a step boundary by signal N (trainer/stop_signal.h): 128 + N, i.e. 130 for
// SIGINT, 143 for SIGTERM, 138 for SIGUSR1, 140 for SIGUSR2; a checkpoint was written when
// --checkpoint_dir is set.
inline int ExitCodeForSignal(int signal_number) { return 128 + signal_number; }

// Checks option values. InvalidArgument naming the flag at fault (`--flag=value: why`).
absl::Status ValidateOptions(const TrainerOptions& options);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_OPTIONS_H_
