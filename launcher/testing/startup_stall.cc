// An MPI program for //tests:fault_startup_stall_test: rank --stall_rank never reaches the
// start-up phase --stall_phase (it sleeps); the others must give up after --timeout_s,
// naming the phase and that rank, and exit 124 (Note [Start-up and teardown deadlines] in
// launcher/rank/phase_deadline.h). Phases: rank_setup (MpiSession's rank-setup collectives),
// node_data_service (NodeDataService::Start's first collective).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/flags.h"
#include "common/logging.h"
#include "launcher/rank/node_data_service.h"
#include "launcher/rank/rank_setup.h"

ABSL_FLAG(int, stall_rank, 1, "the rank that does not reach the phase");
ABSL_FLAG(std::string, stall_phase, "rank_setup", "rank_setup or node_data_service");
ABSL_FLAG(int, timeout_s, 3, "the start-up deadline");

int main(int argc, char** argv) {
  stoker::ParseFlagsOrExit(
      argc, argv, stoker::FlagSpecOf("startup_stall", "launcher/testing/startup_stall.cc"),
      "startup_stall [--stall_rank=R] [--stall_phase=rank_setup|node_data_service] "
      "[--timeout_s=S]: one rank does not reach a start-up phase");
  const int stall_rank = absl::GetFlag(FLAGS_stall_rank);
  const std::string phase = absl::GetFlag(FLAGS_stall_phase);
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  auto stall = [](int rank) {
    std::fprintf(stderr, "rank %d stalls before the phase\n", rank);
    std::fflush(stderr);
    absl::SleepFor(absl::Seconds(600));  // mpirun ends it with the job
  };
  stoker::launcher::RankSetupOptions options;
  options.startup_timeout = timeout;
  if (phase == "rank_setup") {
    options.before_rank_setup = [&](int rank) {
      if (rank == stall_rank) stall(rank);
    };
  }
  auto session = stoker::launcher::MpiSession::Create(&argc, &argv, options);
  if (!session.ok()) return stoker::ReportFailure(session.status());
  const stoker::launcher::RankInfo& rank = (*session)->info();
  stoker::SetLogIdentity(absl::StrCat("startup_stall rank ", rank.rank));
  if (phase == "node_data_service") {
    if (rank.rank == stall_rank) stall(rank.rank);
    stoker::launcher::NodeDataServiceOptions service;
    service.startup_timeout = timeout;
    service.program = "/bin/false";  // never started: the phase ends before
    auto started = stoker::launcher::NodeDataService::Start(rank, (*session)->world(),
                                                            (*session)->node(), service);
    if (!started.ok()) (*session)->Abort(stoker::ReportFailure(started.status()));
  }
  std::fprintf(stderr, "rank %d passed the start-up\n", rank.rank);
  return 0;
}
