// The GPU BatchFeeder: pins the ring, copies each batch to the GPU on a copy stream while
// the previous step computes, and normalises it on the compute stream in one fused pass.
#ifndef STOKER_TRAINER_INPUT_CUDA_BATCH_FEEDER_H_
#define STOKER_TRAINER_INPUT_CUDA_BATCH_FEEDER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

struct CudaFeederStats {
  bool pinned = false;         // the ring is registered with CUDA (page-locked)
  int64_t batches_copied = 0;
};

// Creates the feeder for `device` (the calling thread's current device). `source` must
// outlive it and is used only by the feeder's prefetch thread from then on. If the host
// refuses to register the ring's memory, copies fall back to pageable memory with a
// warning that says why and what it costs.
absl::StatusOr<std::unique_ptr<BatchFeeder>> MakeCudaBatchFeeder(BatchSource* source,
                                                                 const FeederOptions& options,
                                                                 int device,
                                                                 CudaFeederStats* stats = nullptr);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_CUDA_BATCH_FEEDER_H_
