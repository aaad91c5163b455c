// TrainerOptions: everything that describes one training run, composed of the option
// structs of the parts that consume them (input, model, optimizer and schedule, loss
// scaler, step, validation, checkpoints, reporting, device, communication), each with its
// own Validate(); and ValidateOptions, which runs them all plus the checks that relate
// values of different parts, before anything starts. Filled from the command line by
// trainer/flags.h. Free of libtorch, so that option handling is quick to build and test.
#ifndef STOKER_TRAINER_OPTIONS_H_
#define STOKER_TRAINER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"
#include "trainer/checkpoint/checkpoint_options.h"
#include "trainer/comm/comm_options.h"
#include "trainer/input/input_options.h"
#include "trainer/nn/loss_scaler_options.h"
#include "trainer/optim/optim_options.h"
#include "trainer/report/report_options.h"

namespace stoker::trainer {

// A model name ending so is a torch.export archive to load.
inline constexpr char kExportedModelSuffix[] = ".pt2";
inline bool IsExportedModel(absl::string_view name) {
  return absl::EndsWith(name, kExportedModelSuffix);
}

// The model to build (trainer/model_registry.h) and its output.
struct ModelOptions {
  std::string name = "small_cnn";  // or a torch.export archive's path ("m.pt2")
  int num_classes = 10;
  bool fused_blocks = true;  // Note [Fused blocks] (trainer/nn/fused_blocks.h)
  // Batch norm over all ranks' batches: Note [Sync batch norm] (trainer/nn/sync_batch_norm.h).
  bool sync_batchnorm = false;
  std::string init_weights;  // a state dict to start from; empty: the model's initialisation
  // Read init_weights in torch.save's pickle format too: Note [Pickled state dicts]
  // (trainer/nn/state_dict_file.h).
  bool allow_pickle = false;

  absl::Status Validate() const;
};

// One optimizer step: the loss and what happens to the gradients before the optimizer.
struct StepOptions {
  double label_smoothing = 0;  // cross-entropy label smoothing in [0, 1)
  double clip_grad_norm = 0;   // clip the global gradient norm to this (after unscaling); 0: off
  int accumulate = 1;          // micro-batches per optimizer step
  bool cuda_graphs = true;     // GPU: capture and replay the step (trainer/train_step.h)

  absl::Status Validate() const;
};

// Validation on the data service's validation split, every `every` epochs and after the
// last; 0 turns it off.
struct ValidationOptions {
  int every = 1;
  int batch_size = 0;  // 0: the training batch size

  absl::Status Validate() const;
};

enum class DeviceChoice { kAuto, kCuda, kCpu };
// kFp8: bf16 autocast, with the matrix products of an exported model's linear layers in FP8
// (Note [FP8 linear layers], trainer/nn/fp8_linear.h).
enum class Precision { kFloat32, kBFloat16, kFloat16, kFp8 };

absl::StatusOr<DeviceChoice> ParseDeviceChoice(absl::string_view name);
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);

struct DeviceOptions {
  DeviceChoice device = DeviceChoice::kAuto;   // a GPU per local rank when there are GPUs
  Precision precision = Precision::kBFloat16;  // autocast dtype; kFloat32 turns AMP off
  // kFp8: the amaxes each FP8 tensor role keeps (Fp8Recipe::history), 1 to 1024.
  int fp8_amax_history = 16;
  bool channels_last = true;
  bool cudnn_benchmark = true;  // fixed input shapes: let cuDNN pick the fastest kernels
  // Deterministic cuDNN and ATen algorithms (slower): the same run twice, or a run and its
  // resumed continuation, give the same bits on the same GPUs. The CPU path always does.
  bool deterministic = false;
  double cache_release_fraction = 0.9;  // release cached blocks past this share of the device
  bool expandable_segments = true;      // Note [Expandable segments] (trainer/device.h)

  absl::Status Validate() const;
};

// Benchmark runs: the warm-up left out of the throughput figure, and the input pipeline
// alone (batches go through the feeder, nothing trains).
struct BenchmarkOptions {
  int warmup_steps = 10;
  bool data_only = false;

  absl::Status Validate() const;
};

struct TrainerOptions {
  int epochs = 1;
  uint64_t seed = 0;  // base seed: weights, sampling order, augmentation
  ModelOptions model;
  InputOptions input;
  OptimizerOptions optimizer;
  // The schedule's kind and shape; its base rate, epochs and steps per epoch are the run's
  // (ScheduleOptionsFor).
  LrScheduleOptions schedule;
  LossScalerOptions scaler;  // used with fp16
  StepOptions step;
  ValidationOptions validation;
  CheckpointOptions checkpoint;
  ReportOptions report;
  DeviceOptions device;
  CommOptions comm;
  BenchmarkOptions benchmark;
};

// The schedule of a run whose epochs have `steps_per_epoch` optimizer steps.
LrScheduleOptions ScheduleOptionsFor(const TrainerOptions& options, int64_t steps_per_epoch);

// Exit codes of the trainer (and so of mpirun and the launcher): the table of
// common/exit_codes.h, documented in --help and the README.
using ::stoker::ExitCodeForSignal;  // stopped at a step boundary by signal N: 128 + N
using ::stoker::kExitOk;            // training finished
using ::stoker::kExitStoppedEarly;  // --stop_after_steps reached (checkpoint written)
using ::stoker::kExitUsage;         // a bad flag or flag value
inline constexpr int kExitError = ::stoker::kExitFailure;  // a failure; the message says which

// Checks every part's options and how they fit together. InvalidArgument naming the flag
// at fault (`--flag=value: why`).
absl::Status ValidateOptions(const TrainerOptions& options);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_OPTIONS_H_
