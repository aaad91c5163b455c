// The stop vote: how the ranks of a run agree, at every step boundary, whether to go on
// (Note [Stopping together]).
#ifndef STOKER_TRAINER_STOP_VOTE_H_
#define STOKER_TRAINER_STOP_VOTE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Note [Stopping together]
// A stop signal reaches the ranks at slightly different times, and a rank may be blocked
// waiting for its next batch when it comes (the data service may be stopping too). So every
// rank first tries to get its next micro-batch, then all ranks vote (one host allreduce of a
// counter per stop signal and one for "no batch"). Any stop vote stops every rank before it
// trains that batch, so all of them end after the same optimizer step, with the same state,
// and rank 0's checkpoint of that state is the run's. A rank without a batch and without a
// stop vote fails the step on every rank. Partial gradient accumulation is discarded: the
// checkpoint's position is the start of the interrupted optimizer step.

// Votes with `local`, this rank's attempt to get its next batch. Returns the agreed stop
// signal (SIGTERM before SIGINT before SIGUSR2 before SIGUSR1), 0 to go on, or an error
// when a rank had no batch and no rank had a stop signal: `local` itself, or on the other
// ranks Unavailable carrying the exit code of the failing rank's cause (common/
// exit_codes.h; any other cause before a lost peer), so that every rank exits with it. A rank whose
// data service is gone
// (`local` Unavailable) first waits a few seconds for a stop signal: when a job is stopped,
// the data service may get its SIGTERM before the trainers. Must be called in the same
// order on every rank.
absl::StatusOr<int> AgreeOnStop(Communicator& host, const absl::Status& local);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_STOP_VOTE_H_
