// What a checkpoint holds and how a run is restored from it: the model's state dict
// (parameters and buffers, Python's names), the FP8 scaling state of its FP8 layers
// (--precision=fp8), the optimizer's state per parameter, the loss
// scaler's scale and growth tracker, the position in the run (epoch, samples of its
// global order consumed, the global batch, optimizer steps so far: the learning-rate
// schedule's position), the seeds and the CPU generator, and the run's geometry (model,
// classes, world size, batch size, accumulation, dataset size) to refuse a resume that
// could not continue the same run. Stored with CheckpointWriter
// (format version and checksum: trainer/checkpoint/checkpoint_file.h).
#ifndef STOKER_TRAINER_CHECKPOINT_TRAINING_STATE_H_
#define STOKER_TRAINER_CHECKPOINT_TRAINING_STATE_H_

#include <cstdint>
#include <memory>
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

// Note [Snapshot buffers]
// The host memory a run's checkpoints copy the training state into, pinned once when the
// run starts and reused by every checkpoint (allocating gigabytes of pinned memory takes
// up to seconds, so that no checkpoint pays for the allocation), and the copy itself off the
// step's path. A snapshot enqueues, without any host sync:
//   on the current (compute) stream, after the work queued so far: device-to-device copies
//     into device staging tensors of every tensor that may change before the next optimizer
//     step (buffers: batch norm's running statistics change in forward) or that is not
//     contiguous (channels_last weights and their moments);
//   on its own copy stream, after that: the device-to-host copies of every tensor (from its
//     staging tensor, or from the live tensor for the contiguous parameters and optimizer
//     state), then an event and a host callback that marks the copies done.
// The step goes on at once: forward and backward of the next step run while the copies do.
// Only the optimizer step changes the parameters and the optimizer state, so before it the
// training thread makes the compute stream wait for the copies' event (GateUpdates, outside
// any CUDA graph capture: the optimizer's graph is replayed after the wait). The writer
// thread waits for the callback's mark, not a CUDA call (a CUDA call from another thread
// could break a graph capture of the training thread), before it reads the bytes. One
// snapshot is in the buffers at a time: a checkpoint is taken only once the previous write
// has ended (Note [Asynchronous checkpoints] in run_checkpoints.h). A tensor whose shape,
// type or layout is not the one the buffers were made for (a model that replaced it) is
// copied to memory of the caching host allocator, with a host sync.
// With fp16 loss scaling, the scale and the optimizer's step count are read from the device
// (a sync).
class SnapshotBuffers {
 public:
  // Pins host memory for every device tensor of `state` (the model's state dict and the
  // optimizer's state) and device staging memory for those the note names, on the tensors'
  // device. nullptr when `state` has no device tensor (a CPU run). ResourceExhausted naming
  // the size when the memory cannot be had. Call on the training thread.
  static absl::StatusOr<std::shared_ptr<SnapshotBuffers>> Create(const TrainingStateRefs& state);

  // Waits for the copies in flight, then frees the memory.
  ~SnapshotBuffers();
  SnapshotBuffers(const SnapshotBuffers&) = delete;
  SnapshotBuffers& operator=(const SnapshotBuffers&) = delete;

  // Makes the current stream wait, on the device, until the last snapshot's copies have
  // read the state; nothing once it has been called after that snapshot. No host sync.
  // Call on the training thread before the optimizer step changes the parameters, outside
  // a graph capture.
  absl::Status GateUpdates();

  // Pinned host bytes and device staging bytes held.
  int64_t host_bytes() const;
  int64_t staging_bytes() const;

  struct Impl;

 private:
  explicit SnapshotBuffers(std::unique_ptr<Impl> impl);
  friend class SnapshotAccess;
  std::unique_ptr<Impl> impl_;
};

// The checkpoint's bytes. Copies device tensors to the host (syncs).
absl::StatusOr<std::string> EncodeCheckpoint(const TrainingStateRefs& state,
                                             const RunPosition& position,
                                             const RunGeometry& geometry);

// The checkpoint with its tensors in host memory, to be sealed and written later, maybe on
// another thread: device tensors are copied to pinned host memory: with `buffers`, into
// them without waiting (Note [Snapshot buffers]: the checkpoint's WaitForHeldBytes waits,
// and the caller must call buffers->GateUpdates() before the state next changes); without,
// to memory of the caching host allocator, waiting for the copies. With `own_copies`, host
// tensors are copied too, so that the state may change as soon as this returns; without,
// they are referenced and must not change until the checkpoint is sealed (Note [Snapshot
// of the training state] in training_state.cc).
absl::StatusOr<CheckpointWriter> SnapshotCheckpoint(
    const TrainingStateRefs& state, const RunPosition& position, const RunGeometry& geometry,
    bool own_copies, const std::shared_ptr<SnapshotBuffers>& buffers = nullptr);

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

// Copies the FP8 scaling state of the model's layers (ImageClassifier::Fp8States) from the
// checkpoint's "fp8/<layer>/scaling" entries into them, making a state not made yet on the
// device of the model's parameters, and marks them primed (Note [FP8 scaling state in
// checkpoints], trainer/nn/fp8_state.h). Returns a line for the run's log, empty when
// neither the model nor the checkpoint has FP8 state: a checkpoint without it (a run not in
// FP8) leaves the state fresh; one with it, resumed without FP8, is ignored; a layer of
// the model that the checkpoint lacks starts fresh and a saved one the model lacks is
// ignored, each named. InvalidArgument naming the tensor, and --fp8_amax_history, when a
// saved state has another amax history length than this run's.
absl::StatusOr<std::string> RestoreFp8State(const CheckpointReader& checkpoint,
                                            ImageClassifier& model);

// Copies the model, optimizer, scaler and CPU generator state into `state` (same names,
// shapes and dtypes required; InvalidArgument naming the tensor otherwise), and the FP8
// scaling state with RestoreFp8State: its line goes to `fp8_note` when given (empty: none),
// else to the log.
absl::Status RestoreTrainingState(const CheckpointReader& checkpoint,
                                  const TrainingStateRefs& state, std::string* fp8_note = nullptr);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_TRAINING_STATE_H_
