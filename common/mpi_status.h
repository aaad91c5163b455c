// Converts MPI return codes into absl::Status, once, at the edge.
#ifndef STOKER_COMMON_MPI_STATUS_H_
#define STOKER_COMMON_MPI_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace stoker {

// OK for MPI_SUCCESS; otherwise Unavailable (a peer rank is gone or the library failed)
// with the failing expression and MPI's own error string.
absl::Status MpiStatus(int mpi_result, absl::string_view expression);

}  // namespace stoker

// Evaluates an MPI call and returns its error from the enclosing function.
#define RETURN_IF_MPI_ERROR(expr) RETURN_IF_ERROR(::stoker::MpiStatus((expr), #expr))

#endif  // STOKER_COMMON_MPI_STATUS_H_
