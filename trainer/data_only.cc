#include "trainer/data_only.h"

#include "common/status_macros.h"
#include "trainer/device.h"

namespace stoker::trainer {

absl::Status FeedWithoutTraining(RunInput& input, RunReporter& reporter, const RunContext& context,
                                 int64_t first_epoch, int epochs, int warmup_batches) {
  int64_t batches = 0;
  for (int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
    if (epoch + 1 < epochs) RETURN_IF_ERROR(input.PrefetchEpoch(epoch + 1));
    const EpochBatches range = input.BatchesOf(epoch);
    for (int64_t b = range.first; b < range.end; ++b, ++batches) {
      if (batches == warmup_batches) {
        RETURN_IF_ERROR(WaitForDevice(context));
        reporter.StartMeasuring();
      }
      ASSIGN_OR_RETURN(TrainingBatch batch, input.feeder().Next());
      // No step runs: the GPU's wait for input would be all of its time.
      reporter.AddBatch(epoch, b, batch.data_wait, std::nullopt, {});
      reporter.AddStep(static_cast<int64_t>(batch.count) * context.world_size(), at::Tensor(),
                       false);
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
