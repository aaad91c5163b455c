// What the trainer does with the deferred samples its GPU decoder refuses: each goes to the
// data service's bad-data policy (Note [GPU decode failures] in
// data_service/batch_producer.h), which counts it, names its file once in the log and may
// stop the run; when it does not, another sample of the batch takes the refused one's place
// (Note [Replacing samples the GPU cannot decode] in cuda_batch_feeder.cc).
#ifndef STOKER_TRAINER_INPUT_GPU_DECODE_REFUSALS_H_
#define STOKER_TRAINER_INPUT_GPU_DECODE_REFUSALS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data_service/ring/ring_client.h"

namespace stoker::trainer {

// A deferred sample the GPU decoder could not decode: its position in the batch and what
// nvJPEG said.
struct RefusedJpeg {
  int32_t position = 0;
  std::string why;
};

// The sample at position `with` takes the place of the refused one at `refused`.
struct SampleReplacement {
  int32_t refused = 0;
  int32_t with = 0;
};

// Reports one unusable sample (its dataset index and why) to the bad-data policy:
// BatchSource::ReportBadSample for the batch's epoch. Its error stops the run.
using BadSampleReport =
    std::function<absl::StatusOr<std::string>(int64_t sample_index, absl::string_view why)>;

// Reports each refused sample of `batch` (positions increasing, each below batch.count),
// in order, and returns the first error a report gives. Then, when some sample of the
// batch was not refused, each refused position's replacement: the next position of the
// batch, cyclically, that was not refused; DataLoss when every sample was refused.
// InvalidArgument for a position outside the batch or out of order.
absl::StatusOr<std::vector<SampleReplacement>> RouteRefusedSamples(
    const data_service::BatchView& batch, absl::Span<const RefusedJpeg> refused,
    const BadSampleReport& report);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_GPU_DECODE_REFUSALS_H_
