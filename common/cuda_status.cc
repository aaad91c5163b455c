#include "common/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace stoker {

absl::Status CudaStatus(cudaError_t result, absl::string_view expression) {
  if (result == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(expression, " failed: ", cudaGetErrorName(result), ": ",
                                     cudaGetErrorString(result));
  if (result == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view expression) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  std::string message = absl::StrCat(expression, " failed: ", ncclGetErrorString(result));
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0') {
    absl::StrAppend(&message, " (", last, ")");
  }
  if (result == ncclRemoteError || result == ncclSystemError) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

}  // namespace stoker
