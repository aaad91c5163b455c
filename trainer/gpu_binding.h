// BindRankToGpu: the first CUDA work of a trainer rank. It binds the rank to the GPU of
// its local rank and creates its CUDA context there before any other CUDA call, so that no
// rank ever opens a context on another rank's GPU.
#ifndef STOKER_TRAINER_GPU_BINDING_H_
#define STOKER_TRAINER_GPU_BINDING_H_

#include "absl/status/statusor.h"
#include "launcher/rank/rank_setup.h"
#include "trainer/options.h"

namespace stoker::trainer {

// Whether the rank trains on a GPU, by --device: cpu never; auto when a GPU is visible
// (and this build has CUDA); cuda always, else FailedPrecondition naming --device=cuda.
// On a GPU, binds to GpuForLocalRank(rank, ...) (honouring CUDA_VISIBLE_DEVICES) and
// creates the context; a CUDA fault is Internal (common/cuda_status.h).
absl::StatusOr<bool> BindRankToGpu(DeviceChoice device, const launcher::RankInfo& rank);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GPU_BINDING_H_
