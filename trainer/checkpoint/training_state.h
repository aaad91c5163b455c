// What a checkpoint holds and how a run is restored from it: the model's state dict
// (parameters and buffers, Python's names), the optimizer's state per parameter, the loss
// scaler's scale and growth tracker, the position in the run (epoch, samples of its
// global order consumed, the global batch, optimizer steps so far: the learning-rate
// schedule's position), the seeds and the CPU generator, and the run's geometry (model,
// classes, world size, batch size, accumulation, dataset size) to refuse a resume that
// could not continue the same run. Stored with CheckpointWriter
// (format version and checksum: trainer/checkpoint/checkpoint_file.h).
#ifndef STOKER_TRAINER_CHECKPOINT_TRAINING_STATE_H_
#define STOKER_TRAINER_CHECKPOINT_TRAINING_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/checkpoint/checkpoint_file.h"
#include "trainer/nn/image_classifier.h"
#include "trainer/nn/loss_scaler.h"
#include "trainer/optim/fused_optimizer.h"

namespace stoker::trainer {

// Where a run stands at a step boundary. A resume continues from `samples_done` on any
// world size and batch size (Note [The rest of an epoch] in data_service/dataset/sampler.h);
// `batches_done` is the batch index of the run that wrote it, for its reports.
struct RunPosition {
  int64_t epoch = 0;         // the epoch to continue in (== epochs: training is over)
  int64_t batches_done = 0;  // batches of that epoch consumed (trained, or the skipped short one)
  int64_t global_step = 0;   // optimizer steps taken so far
  // Samples of the epoch's global order consumed, over all ranks.
  int64_t samples_done = 0;
  // Samples per optimizer step when it was written: world size x batch size x accumulation.
  int64_t global_batch = 0;
};

// The run a checkpoint belongs to.
struct RunGeometry {
  std::string model;
  int64_t num_classes = 0;
  int64_t image_size = 0;
  int64_t world_size = 0;
  int64_t batch_size = 0;  // per rank and micro-batch
  int64_t accumulate = 1;
  std::string optimizer;  // sgd or adamw
  uint64_t seed = 0;      // the base seed the data service sampled with
  // Samples in the training split (0: unknown, a synthetic input or an older checkpoint).
  int64_t dataset_size = 0;
};

// Everything the caller keeps about the state being saved or restored. The optimizer's
// state is matched to `parameter_names` (the optimizer's parameter order).
struct TrainingStateRefs {
  ImageClassifier* model = nullptr;
  FusedOptimizer* optimizer = nullptr;
  std::vector<std::string> parameter_names;
  LossScaler* scaler = nullptr;
};

// The checkpoint's bytes. Copies device tensors to the host (syncs).
absl::StatusOr<std::string> EncodeCheckpoint(const TrainingStateRefs& state,
                                             const RunPosition& position,
                                             const RunGeometry& geometry);

// The checkpoint with its tensors in host memory, to be sealed and written later, maybe on
// another thread: device tensors are copied to pinned host memory (waits for the copies).
// With `own_copies`, host tensors are copied too, so that the state may change as soon as
// this returns; without, they are referenced and must not change until the checkpoint is
// sealed (Note [Snapshot of the training state] in training_state.cc).
absl::StatusOr<CheckpointWriter> SnapshotCheckpoint(const TrainingStateRefs& state,
                                                    const RunPosition& position,
                                                    const RunGeometry& geometry, bool own_copies);

// The geometry and position a checkpoint records. A checkpoint written before positions
// were counted in samples has its samples_done derived from its batches: every batch of
// its run had world size x batch size samples of the global order.
absl::StatusOr<RunGeometry> CheckpointGeometry(const CheckpointReader& checkpoint);
absl::StatusOr<RunPosition> CheckpointPosition(const CheckpointReader& checkpoint);

// Whether this run can continue `saved`: the same model, classes and optimizer always;
// mid-epoch also the same seed (the epoch's order depends on it). The world size, batch
// size and accumulation may change anywhere (Note [Resuming on another geometry] in
// trainer/train_loop.cc). InvalidArgument naming the flag that differs and `source`.
absl::Status CheckResumable(const RunGeometry& saved, const RunPosition& position,
                            const RunGeometry& current, const std::string& source);

// Whether the data service's training split of `dataset_size` samples can continue the
// epoch `position` stopped in: the same size as the checkpoint's when it stopped mid-epoch
// (and recorded one). InvalidArgument naming the launcher's data flags and `source`.
absl::Status CheckResumableDataset(const RunGeometry& saved, const RunPosition& position,
                                   int64_t dataset_size, const std::string& source);

// Copies the model's parameters and buffers from the checkpoint into `model` (same names,
// shapes and dtypes required; InvalidArgument naming the tensor otherwise).
absl::Status RestoreModelState(const CheckpointReader& checkpoint, ImageClassifier& model);

// Copies the model, optimizer, scaler and CPU generator state into `state` (same names,
// shapes and dtypes required; InvalidArgument naming the tensor otherwise).
absl::Status RestoreTrainingState(const CheckpointReader& checkpoint,
                                  const TrainingStateRefs& state);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_TRAINING_STATE_H_
