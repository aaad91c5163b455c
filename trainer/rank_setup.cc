#include "trainer/rank_setup.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "common/mpi_status.h"
#include "common/status_macros.h"

namespace stoker::trainer {

absl::StatusOr<std::unique_ptr<MpiSession>> MpiSession::Create(int* argc, char*** argv) {
  int initialized = 0;
  RETURN_IF_MPI_ERROR(MPI_Initialized(&initialized));
  if (initialized) return absl::FailedPreconditionError("MPI is already initialized");
  // A rank must not outlive the process that started it (mpirun's daemon, srun's
  // step daemon): if that one dies, so does this rank, instead of waiting in a
  // collective for ever.
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) std::_Exit(1);  // the parent died before prctl took effect
  int provided = 0;
  RETURN_IF_MPI_ERROR(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as return codes so that they become Status values.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  RankInfo info;
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(MPI_COMM_WORLD, &info.world_size));
  MPI_Comm node_comm;
  RETURN_IF_MPI_ERROR(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank,
                                          MPI_INFO_NULL, &node_comm));
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(node_comm, &info.local_rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(node_comm, &info.local_size));
  return std::unique_ptr<MpiSession>(new MpiSession(info, node_comm));
}

MpiSession::~MpiSession() {
  MPI_Comm_free(&node_comm_);
  MPI_Finalize();
}

void MpiSession::Abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace stoker::trainer
