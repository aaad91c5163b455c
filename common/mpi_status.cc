#include "common/mpi_status.h"

#include <mpi.h>

#include "absl/strings/str_cat.h"

namespace stoker {

absl::Status MpiStatus(int mpi_result, absl::string_view expression) {
  if (mpi_result == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(mpi_result, text, &length) != MPI_SUCCESS) length = 0;
  return absl::UnavailableError(
      absl::StrCat(expression, " failed: ", absl::string_view(text, length)));
}

}  // namespace stoker
