// Converts CUDA runtime and NCCL results into absl::Status, once, at the edge.
#ifndef STOKER_COMMON_CUDA_STATUS_H_
#define STOKER_COMMON_CUDA_STATUS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace stoker {

// OK for cudaSuccess; ResourceExhausted for out-of-memory; otherwise Internal, with the
// failing expression and CUDA's own message.
absl::Status CudaStatus(cudaError_t result, absl::string_view expression);

// OK for ncclSuccess and ncclInProgress (a non-blocking communicator still working);
// Unavailable for remote and system errors (a peer is gone); otherwise Internal.
absl::Status NcclStatus(ncclResult_t result, absl::string_view expression);

}  // namespace stoker

#define RETURN_IF_CUDA_ERROR(expr) RETURN_IF_ERROR(::stoker::CudaStatus((expr), #expr))
#define RETURN_IF_NCCL_ERROR(expr) RETURN_IF_ERROR(::stoker::NcclStatus((expr), #expr))

#endif  // STOKER_COMMON_CUDA_STATUS_H_
