// The input pipeline alone (--data_only): every batch is fetched, copied to the device and
// normalised, and nothing trains, so that the data path's throughput can be measured.
#ifndef STOKER_TRAINER_DATA_ONLY_H_
#define STOKER_TRAINER_DATA_ONLY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/report/run_reporter.h"
#include "trainer/run_context.h"
#include "trainer/run_input.h"

namespace stoker::trainer {

// Takes every batch of epochs [first_epoch, epochs) from `input`, counting them in
// `reporter`'s throughput; the measured figure starts after `warmup_batches`.
absl::Status FeedWithoutTraining(RunInput& input, RunReporter& reporter, const RunContext& context,
                                 int64_t first_epoch, int epochs, int warmup_batches);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_DATA_ONLY_H_
