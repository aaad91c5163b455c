// A two-rank MPI program for //tests:fault_finalize_stall_test: after a barrier, rank
// --stall_rank stops itself (SIGSTOP) before MPI_Finalize; the others go into MPI_Finalize
// through MpiSession's destructor, bounded by --finalize_timeout_s (Note [Bounded
// MPI_Finalize] in launcher/rank/rank_setup.h).
#include <mpi.h>

#include <csignal>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "launcher/rank/rank_setup.h"

ABSL_FLAG(int, stall_rank, 1, "the rank that stops itself before MPI_Finalize");
ABSL_FLAG(int, finalize_timeout_s, 3, "RankSetupOptions::finalize_timeout");

int main(int argc, char** argv) {
  stoker::ParseFlagsOrExit(
      argc, argv, stoker::FlagSpecOf("finalize_stall", "launcher/testing/finalize_stall.cc"),
      "finalize_stall [--stall_rank=R] [--finalize_timeout_s=S]: one rank stalls before "
      "MPI_Finalize");
  stoker::launcher::RankSetupOptions options;
  options.finalize_timeout = absl::Seconds(absl::GetFlag(FLAGS_finalize_timeout_s));
  auto session = stoker::launcher::MpiSession::Create(&argc, &argv, options);
  if (!session.ok()) {
    std::fprintf(stderr, "MPI start-up failed\n");
    return 1;
  }
  const int rank = (*session)->info().rank;
  MPI_Barrier(MPI_COMM_WORLD);
  std::fprintf(stderr, "rank %d at the end of the job\n", rank);
  std::fflush(stderr);
  if (rank == absl::GetFlag(FLAGS_stall_rank)) std::raise(SIGSTOP);
  return 0;  // ~MpiSession: MPI_Finalize
}
