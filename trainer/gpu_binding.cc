#include "trainer/gpu_binding.h"

#include <cstdlib>

#include "common/status_macros.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#endif

namespace stoker::trainer {

absl::StatusOr<bool> BindRankToGpu(DeviceChoice device, const launcher::RankInfo& rank) {
  if (device == DeviceChoice::kCpu) return false;
#ifdef STOKER_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count == 0) {
    if (device == DeviceChoice::kCuda) {
      return absl::FailedPreconditionError("--device=cuda but no GPU is visible");
    }
    return false;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  ASSIGN_OR_RETURN(const int gpu,
                   launcher::GpuForLocalRank(rank, count, visible != nullptr ? visible : ""));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(gpu), "cudaSetDevice"));
  RETURN_IF_ERROR(CudaStatus(cudaFree(nullptr), "creating the CUDA context"));
  return true;
#else
  if (device == DeviceChoice::kCuda) {
    return absl::FailedPreconditionError("--device=cuda but this build has no CUDA");
  }
  (void)rank;
  return false;
#endif
}

}  // namespace stoker::trainer
