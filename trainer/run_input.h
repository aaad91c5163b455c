// RunInput: where a run's batches come from and how many there are: the data service's
// rings (training, and validation where the service has that split), or one synthetic
// batch made on the device. The training loop sees only this interface, so that a test can
// feed it batches of its own.
#ifndef STOKER_TRAINER_RUN_INPUT_H_
#define STOKER_TRAINER_RUN_INPUT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/input/batch_feeder.h"
#include "trainer/input/decode_share_gauge.h"
#include "trainer/options.h"
#include "trainer/run_context.h"

namespace stoker::trainer {

// One validation pass: its batches, delivered by `feeder` in step order.
struct ValidationPass {
  int64_t batches = 0;
  int batch_size = 0;
  std::unique_ptr<BatchSource> source;  // what `feeder` reads; declared first, so destroyed last
  std::unique_ptr<BatchFeeder> feeder;
};

// The batches of one epoch that a run takes, by their index in the epoch: [first,
// trained_end) are trained, [trained_end, end) delivered and skipped (the short last batch,
// --drop_last_batch).
struct EpochBatches {
  int64_t first = 0;
  int64_t trained_end = 0;
  int64_t end = 0;
};

// Owned by the training thread.
class RunInput {
 public:
  virtual ~RunInput() = default;

  // Batches of a whole epoch as delivered, and as trained: without the short last batch
  // when it is dropped (--drop_last_batch).
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t trained_per_epoch() const = 0;
  // The batches of `epoch` this run takes: a whole epoch's, or in the epoch the run resumed
  // in, the rest of it (Note [Resuming on another geometry] in trainer/train_loop.cc).
  virtual EpochBatches BatchesOf(int64_t epoch) const {
    (void)epoch;
    return {0, trained_per_epoch(), batches_per_epoch()};
  }
  // Samples in the training split (0: unknown, as for synthetic batches).
  virtual int64_t dataset_size() const { return 0; }

  // The training batches in (epoch, step) order, from the run's start position on.
  virtual BatchFeeder& feeder() = 0;
  // Asks for `epoch`'s training batches now, so that they are ready at the epoch boundary.
  virtual absl::Status PrefetchEpoch(int64_t epoch) = 0;

  virtual bool has_validation() const = 0;
  // Starts the validation pass after `epoch`. Unavailable when the data service is gone.
  virtual absl::StatusOr<ValidationPass> StartValidation(int64_t epoch) = 0;
};

// Where the run starts: its first epoch and the samples of that epoch's global order
// already trained, over all ranks (Note [The rest of an epoch] in
// data_service/dataset/sampler.h).
struct InputStart {
  int64_t epoch = 0;
  int64_t samples_done = 0;
  uint64_t seed = 0;  // the run's (rank 0's, or the checkpoint's) seed
  // Called with the training split's size before the first epoch is asked for; an error
  // ends the opening (a resume refuses another dataset). May be empty.
  std::function<absl::Status(int64_t dataset_size)> check_dataset_size;
};

using RunInputFactory = std::function<absl::StatusOr<std::unique_ptr<RunInput>>(const InputStart&)>;

// The input `options` describe: synthetic batches with --synthetic_steps, else the rings of
// the node's data service at --data_socket. Batches land on the context's device. The
// rings' input sets the GPU decode share it uses in `decode_share` (may be null; outlives
// the input).
absl::StatusOr<std::unique_ptr<RunInput>> OpenRunInput(const TrainerOptions& options,
                                                       const RunContext& context,
                                                       const InputStart& start,
                                                       DecodeShareGauge* decode_share = nullptr);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_RUN_INPUT_H_
