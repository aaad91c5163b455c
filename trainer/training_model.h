// TrainingModel: the model of a run with everything that updates it: its parameters (in
// registration order, with their state-dict names), the gradient buckets that reduce them
// across ranks during backward, the fused optimizer (two parameter groups with
// --no_decay_bn_bias), the loss scaler (fp16) and the step that ties them together.
#ifndef STOKER_TRAINER_TRAINING_MODEL_H_
#define STOKER_TRAINER_TRAINING_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/grad_buckets.h"
#include "trainer/comm/timed_communicator.h"
#include "trainer/nn/image_classifier.h"
#include "trainer/nn/loss_scaler.h"
#include "trainer/nn/sync_batch_norm.h"
#include "trainer/optim/fused_optimizer.h"
#include "trainer/options.h"
#include "trainer/run_context.h"
#include "trainer/train_step.h"

namespace stoker::trainer {

// Owned by the training thread. Members are declared in dependency order.
class TrainingModel {
 public:
  // Builds the model (seeded with --seed) on the context's device, channels_last when asked,
  // and what trains it; gradients are averaged through `gradients`.
  static absl::StatusOr<std::unique_ptr<TrainingModel>> Create(const TrainerOptions& options,
                                                               const RunContext& context,
                                                               Communicator& gradients);

  // Batch norm stops synchronising over the gradient communicator (--sync_batchnorm).
  ~TrainingModel();

  ImageClassifier& model() { return *model_; }
  // Seeds the model's random ops (dropout) for optimizer step `step` of rank `rank`: a
  // function of (run seed, rank, step) alone, so a resumed run draws the masks that the
  // uninterrupted run drew, and ranks draw different ones.
  void SeedRandomOps(uint64_t run_seed, int rank, int64_t step);
  TrainStep& step() { return *step_; }
  const LossScaler& scaler() const { return scaler_; }
  // The state checkpoints save and restore.
  TrainingStateRefs state() {
    return TrainingStateRefs{model_.get(), optimizer_.get(), optimizer_names_, &scaler_};
  }
  // Gives every rank rank 0's weights and buffers before the first step, as DDP does. A
  // collective over `communicator`: the same order on every rank.
  absl::Status BroadcastState(Communicator& communicator);
  // Gives every rank rank 0's buffers (batch-norm running mean and variance,
  // num_batches_tracked; floating and integer) and FP8 scaling state (--precision=fp8), not
  // its parameters: the running statistics that DDP's broadcast_buffers gives every
  // forward pass. The training loop calls it
  // before validation, before a checkpoint and before --export (Note [Running statistics
  // as DDP keeps them]). A collective over `communicator` (the gradient communicator:
  // device memory on the GPU). Must be called in the same order on every rank.
  absl::Status SyncBuffers(Communicator& communicator);
  // The raw bytes of every parameter, in registration order, to `path` (tests).
  absl::Status WriteParameters(const std::string& path);
  // The model's state dict, pickled as torch.save writes it (torchvision's names and
  // layout), to `path` atomically with `file_mode` (--export). A write failure names the flag
  // and carries the checkpoint I/O exit code.
  absl::Status ExportWeights(const std::string& path, uint32_t file_mode);
  // CPU profiling and tracing: seconds spent inside the gradient allreduces so far (0 when
  // not timed).
  double allreduce_seconds() const { return timed_ != nullptr ? timed_->seconds() : 0; }
  bool allreduce_timed() const { return timed_ != nullptr; }

 private:
  explicit TrainingModel(LossScaler scaler) : scaler_(std::move(scaler)) {}

  std::shared_ptr<ImageClassifier> model_;
  std::vector<std::string> optimizer_names_;  // the optimizer's parameter order (its groups)
  std::unique_ptr<TimedCommunicator> timed_;
  std::unique_ptr<BatchNormGroup> sync_group_;  // --sync_batchnorm over the gradient communicator
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<FusedOptimizer> optimizer_;
  LossScaler scaler_;
  std::unique_ptr<TrainStep> step_;
};

// The shape of a run as checkpoints record it, to check that a resumed run can continue.
RunGeometry GeometryOf(const TrainerOptions& options, int world_size, uint64_t seed);
// What makes two runs the same run for their checkpoint directory (CheckpointOptions::
// run_identity): what a checkpoint's tensors and its sampling order depend on.
std::string RunIdentity(const TrainerOptions& options);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAINING_MODEL_H_
