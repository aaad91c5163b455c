// The GPU BatchFeeder: pins the ring, copies each batch to the GPU on a copy stream while
// the previous step computes, and normalises it on the compute stream in one fused pass.
#ifndef STOKER_TRAINER_INPUT_CUDA_BATCH_FEEDER_H_
#define STOKER_TRAINER_INPUT_CUDA_BATCH_FEEDER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

struct CudaFeederStats {
  bool pinned = false;  // the ring is registered with CUDA (page-locked)
  int64_t batches_copied = 0;
  // Deferred samples (Note [Deferred samples] in data_service/image/deferred_jpeg.h):
  // decoded on the GPU, and refused by nvJPEG, reported to the bad-data policy and
  // replaced (Note [Replacing samples the GPU cannot decode] in cuda_batch_feeder.cc).
  int64_t gpu_decoded = 0;
  int64_t gpu_decode_failures = 0;
  bool gpu_decode_hardware = false;  // nvJPEG's hardware backend (the JPEG engines) decodes
};

// Creates the feeder for `device` (the calling thread's current device). `source` must
// outlive it and is used only by the feeder's prefetch thread from then on. If the host
// refuses to register the ring's memory, copies fall back to pageable memory with a
// warning that says why and what it costs. Batches with deferred samples are decoded on
// the copy stream by a GpuJpegDecoder, made at the first such batch (FailedPrecondition,
// naming the library, if libnvjpeg cannot be loaded). `stats` is written by the prefetch
// thread; read it once the feeder is idle or gone.
absl::StatusOr<std::unique_ptr<BatchFeeder>> MakeCudaBatchFeeder(BatchSource* source,
                                                                 const FeederOptions& options,
                                                                 int device,
                                                                 CudaFeederStats* stats = nullptr);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_CUDA_BATCH_FEEDER_H_
