// The exit codes of launcher, trainer and data_service: one table, so that a scheduler's
// requeue policy can tell a bad configuration from bad data, a lost peer, a timeout, a
// checkpoint I/O fault and a resumable stop. mpirun passes a rank's code on (MPI_Abort's
// code, or the first non-zero exit) and the launcher passes on mpirun's or the data
// service's (launcher/job.h), so the job ends with the code of its first failure.
//
// | code    | cause                                       | requeue?                         |
// | ------- | ------------------------------------------- | -------------------------------- |
// | 0       | finished                                    | no                               |
// | 1       | any other failure (an internal fault)       | the message says                 |
// | 2       | bad flag or configuration file; no room     | no: fix the command              |
// |         | for the rings in /dev/shm, a ring's name    |                                  |
// |         | taken (another job's or user's segment)     |                                  |
// | 65      | bad data (bad-file cap, more classes than   | no: fix the dataset              |
// |         | --num_classes)                              |                                  |
// | 69      | a rank or the data service was lost or is   | yes                              |
// |         | stuck, or another process broke a ring      |                                  |
// |         | (truncated it, corrupted a header or slot)  |                                  |
// | 74      | checkpoint or exported-weights I/O          | after fixing the storage         |
// | 75      | --stop_after_steps reached, checkpoint      | yes: resumes                     |
// | 124     | a collective or start-up deadline passed    | yes, once; then look at the node |
// | 128 + N | stopped by signal N at a step boundary      | yes: resumes from its checkpoint |
//
// A Status carries its exit code as a payload (WithExitCode); untagged ones get theirs from
// the canonical code (ExitCodeOf). Only main() turns a Status into an exit code.
#ifndef STOKER_COMMON_EXIT_CODES_H_
#define STOKER_COMMON_EXIT_CODES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace stoker {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBadData = 65;       // sysexits' EX_DATAERR
inline constexpr int kExitPeerLost = 69;      // EX_UNAVAILABLE
inline constexpr int kExitCheckpointIo = 74;  // EX_IOERR
inline constexpr int kExitStoppedEarly = 75;  // EX_TEMPFAIL
inline constexpr int kExitTimeout = 124;      // as timeout(1)

// Stopped at a step boundary by signal N (a checkpoint was written when the run has a
// checkpoint directory): 130 for SIGINT, 143 for SIGTERM, 138 SIGUSR1, 140 SIGUSR2.
inline int ExitCodeForSignal(int signal_number) { return 128 + signal_number; }

// `status` (not OK) tagged with `exit_code`; replaces an earlier tag.
absl::Status WithExitCode(absl::Status status, int exit_code);

// The exit code for `status`: 0 for OK; its tag (WithExitCode) if it has one; else by the
// canonical code: Unavailable -> kExitPeerLost, DeadlineExceeded -> kExitTimeout, DataLoss
// and OutOfRange -> kExitBadData (the data service's bad-file cap, a dataset with more
// classes than --num_classes); anything else kExitFailure. A ring's errors carry the
// code of whoever is at fault (Note [Whose fault a ring error is] in
// data_service/ring/ring_client.cc).
int ExitCodeOf(const absl::Status& status);

// What an exit code means, in the words of the table above ("bad data"); "failure" for a
// code outside it.
std::string ExitCause(int exit_code);

// "CODE: message" of `status`, without its payloads (absl::Status::ToString prints them).
std::string StatusText(const absl::Status& status);

// `status` (not OK) marked as another process's failure that this one ends with (a rank
// that stops because a peer failed): it keeps its exit code, and ReportFailure logs it as a
// warning, so that the job's first error line is the failing process's own.
absl::Status AsPeerFailure(absl::Status status);

// Logs the line that ends a program that failed with `status` (not OK),
// "<cause> (exit N): CODE: message" (an error; a warning for AsPeerFailure), and returns N.
int ReportFailure(const absl::Status& status);

}  // namespace stoker

#endif  // STOKER_COMMON_EXIT_CODES_H_
