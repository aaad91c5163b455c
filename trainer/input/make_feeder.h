// MakeBatchFeeder: the batch feeder for a training device, the one place that chooses
// between the CPU feeder and the CUDA feeder (pinned ring, copy stream, GPU normalisation).
#ifndef STOKER_TRAINER_INPUT_MAKE_FEEDER_H_
#define STOKER_TRAINER_INPUT_MAKE_FEEDER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

// A feeder of `source`'s batches onto `device` (a CUDA device, or the CPU). Borrows
// `source`, which must outlive it. Unimplemented for a CUDA device in a build without CUDA.
absl::StatusOr<std::unique_ptr<BatchFeeder>> MakeBatchFeeder(BatchSource* source,
                                                             const FeederOptions& options,
                                                             at::Device device);

// OK when batches with deferred samples can be fed onto `device`: a CUDA device in a build
// with CUDA, and libnvjpeg loads. Otherwise FailedPrecondition saying why.
absl::Status CheckGpuJpegDecode(at::Device device);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_MAKE_FEEDER_H_
