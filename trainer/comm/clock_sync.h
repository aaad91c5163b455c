// MeasureClockOffset: how far this rank's clock (CLOCK_MONOTONIC, common/trace_events.h) is
// from rank 0's, by MPI ping-pong (Note [One clock for the job] in common/trace_events.h),
// and a ping from rank 0 to every rank recorded as a flow arrow in the trace, which shows
// after merging that the clocks agree (a message is received after it is sent).
#ifndef STOKER_TRAINER_COMM_CLOCK_SYNC_H_
#define STOKER_TRAINER_COMM_CLOCK_SYNC_H_

#include <mpi.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/trace_events.h"

namespace stoker::trainer {

struct ClockOffset {
  // Rank 0's clock is this rank's plus offset_us, give or take error_us (half the round
  // trip of least time). Rank 0: 0 and 0.
  int64_t offset_us = 0;
  int64_t error_us = 0;
  int64_t round_trip_us = 0;   // the least round trip
  int64_t measured_at_us = 0;  // on this rank's clock
  int rounds = 0;

  std::string Json() const;  // {"offset_us": ..., ...}
};

// The trace's thread of the clock pings.
inline constexpr int kClockTraceThread = 9;

// Every rank of `comm` calls it (a collective): rank 0 answers `rounds` pings of each rank in
// turn, then pings every rank once more, which `trace` (may be null; recorded only while
// it records) shows as a flow from rank 0's "ping" slice to the rank's "ping received"
// slice. Errors name the MPI call.
absl::StatusOr<ClockOffset> MeasureClockOffset(MPI_Comm comm, int rounds, TraceRecorder* trace);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_CLOCK_SYNC_H_
