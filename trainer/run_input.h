// RunInput: where a run's batches come from and how many there are: the data service's
// rings (training, and validation where the service has that split), or one synthetic
// batch made on the device. The training loop sees only this interface, so that a test can
// feed it batches of its own.
#ifndef STOKER_TRAINER_RUN_INPUT_H_
#define STOKER_TRAINER_RUN_INPUT_H_

#include <cstdint>
#include <functional>
#include <memory>

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

// Owned by the training thread.
class RunInput {
 public:
  virtual ~RunInput() = default;

  // Batches per epoch as delivered, and as trained: without the short last batch when it is
  // dropped (--drop_last_batch). The same for every epoch.
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t trained_per_epoch() const = 0;

  // The training batches in (epoch, step) order, from the run's start position on.
  virtual BatchFeeder& feeder() = 0;
  // Asks for `epoch`'s training batches now, so that they are ready at the epoch boundary.
  virtual absl::Status PrefetchEpoch(int64_t epoch) = 0;

  virtual bool has_validation() const = 0;
  // Starts the validation pass after `epoch`. Unavailable when the data service is gone.
  virtual absl::StatusOr<ValidationPass> StartValidation(int64_t epoch) = 0;
};

// Where the run starts: its first epoch and the batches of it already trained.
struct InputStart {
  int64_t epoch = 0;
  int64_t batches_done = 0;
  uint64_t seed = 0;  // the run's (rank 0's, or the checkpoint's) seed
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
