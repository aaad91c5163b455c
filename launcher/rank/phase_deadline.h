// Deadlines for the phases of a rank's start-up and teardown whose calls wait for other
// ranks and cannot be interrupted: the rank-setup collectives, the node data services'
// collectives, the NCCL id broadcast and ncclCommInitRank, and at the end ncclCommDestroy
// and stream syncs. AwaitPhase() is a barrier that gives up, naming the ranks that did not
// come; PhaseDeadline ends the process when one blocking call does not return in time.
#ifndef STOKER_LAUNCHER_RANK_PHASE_DEADLINE_H_
#define STOKER_LAUNCHER_RANK_PHASE_DEADLINE_H_

#include <mpi.h>

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace stoker::launcher {

// Note [Start-up and teardown deadlines]
// A start-up collective waits for every rank: one that never comes (stopped, hung on a file
// system, stuck before its first MPI call) would hold all the others there for ever, with
// nothing said. So each phase begins with AwaitPhase(): every rank tells rank 0 of the
// communicator that it has arrived (point-to-point, polled, so nothing blocks), and rank 0
// answers each one once all have come, or at the deadline with the list of those missing.
// The ranks that came all fail the same way, naming the phase and the missing ranks
// (DeadlineExceeded: exit 124), and end the job (MPI_Abort, or exit without MPI_Finalize,
// which makes mpirun end it). Once every rank has arrived, the phase's own calls still run
// under a PhaseDeadline, which ends a rank whose call does not return; teardown calls
// (ncclCommDestroy, stream syncs) run under one too.

// Waits, at most `timeout`, until every rank of `comm` has called AwaitPhase(comm, phase).
// Must be called in the same order on every rank of `comm`, with the same `phase` (a short
// description: "MPI rank setup"), which tells the phases' messages apart. OK once all have
// arrived. DeadlineExceeded otherwise, on every rank that arrived: `start-up phase "P" was
// not reached by rank(s) R of N within T (...)`, naming the missing ranks by their rank in
// MPI_COMM_WORLD as rank 0 of `comm` saw them, or saying that rank 0 itself did not answer.
absl::Status AwaitPhase(MPI_Comm comm, absl::string_view phase, absl::Duration timeout);

// Ends the process if it is not destroyed within `timeout` of its construction: logs
// `timeout (exit 124): <what> did not return within T: ...` and calls std::_Exit(124), so
// that the job (mpirun) ends instead of waiting for this rank. For calls that cannot be
// interrupted. Owns a watchdog thread, joined in the destructor.
//
//   { PhaseDeadline deadline("ncclCommInitRank", timeout); ncclCommInitRank(...); }
class PhaseDeadline {
 public:
  PhaseDeadline(std::string what, absl::Duration timeout);
  ~PhaseDeadline();
  PhaseDeadline(const PhaseDeadline&) = delete;
  PhaseDeadline& operator=(const PhaseDeadline&) = delete;

 private:
  const std::string what_;
  const absl::Duration timeout_;
  absl::Notification done_;
  std::thread watchdog_;  // last: started once the members above exist
};

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_PHASE_DEADLINE_H_
