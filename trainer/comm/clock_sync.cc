#include "trainer/comm/clock_sync.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/mpi_status.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

constexpr int kPingTag = 7301;
constexpr int kPongTag = 7302;
constexpr int kFlowTag = 7303;

// Flow ids of the clock pings: unique per (rank, measurement) within the job's trace, from
// 2^52 on (below: RingBatchFlowId) and below 2^53.
uint64_t FlowId(int rank, int64_t sequence) {
  return (uint64_t{1} << 52) | ((static_cast<uint64_t>(sequence) & 0xFFFFFFF) << 24) |
         (static_cast<uint64_t>(rank) & 0xFFFFFF);
}

}  // namespace

std::string ClockOffset::Json() const {
  return TraceArgs()
      .Add("offset_us", offset_us)
      .Add("error_us", error_us)
      .Add("round_trip_us", round_trip_us)
      .Add("measured_at_us", measured_at_us)
      .Add("rounds", rounds)
      .Json();
}

absl::StatusOr<ClockOffset> MeasureClockOffset(MPI_Comm comm, int rounds, TraceRecorder* trace) {
  int rank = 0, world = 1;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank"));
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(comm, &world), "MPI_Comm_size"));
  static int64_t sequence = 0;  // measurements so far: every rank counts the same
  ++sequence;
  ClockOffset result;
  result.rounds = rounds;
  result.measured_at_us = TraceNowMicros();
  if (rank == 0) {
    for (int peer = 1; peer < world; ++peer) {
      for (int i = 0; i < rounds; ++i) {
        int64_t ping = 0;
        RETURN_IF_ERROR(MpiStatus(
            MPI_Recv(&ping, 1, MPI_INT64_T, peer, kPingTag, comm, MPI_STATUS_IGNORE), "MPI_Recv"));
        const int64_t now = TraceNowMicros();
        RETURN_IF_ERROR(
            MpiStatus(MPI_Send(&now, 1, MPI_INT64_T, peer, kPongTag, comm), "MPI_Send"));
      }
    }
    for (int peer = 1; peer < world; ++peer) {
      const int64_t sent = TraceNowMicros();
      if (trace != nullptr) {
        trace->FlowStart(kClockTraceThread, "ping", FlowId(peer, sequence), sent);
      }
      RETURN_IF_ERROR(
          MpiStatus(MPI_Send(&sent, 1, MPI_INT64_T, peer, kFlowTag, comm), "MPI_Send (ping)"));
      if (trace != nullptr) {
        trace->Complete(kClockTraceThread, "ping", "clock", sent, TraceNowMicros(),
                        TraceArgs().Add("to_rank", peer));
      }
    }
    return result;
  }
  result.round_trip_us = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < rounds; ++i) {
    const int64_t sent = TraceNowMicros();
    RETURN_IF_ERROR(MpiStatus(MPI_Send(&sent, 1, MPI_INT64_T, 0, kPingTag, comm), "MPI_Send"));
    int64_t remote = 0;
    RETURN_IF_ERROR(MpiStatus(
        MPI_Recv(&remote, 1, MPI_INT64_T, 0, kPongTag, comm, MPI_STATUS_IGNORE), "MPI_Recv"));
    const int64_t received = TraceNowMicros();
    const int64_t round_trip = received - sent;
    if (round_trip < result.round_trip_us) {
      result.round_trip_us = round_trip;
      // Rank 0 read its clock somewhere in the round trip: assume its middle.
      result.offset_us = remote - (sent + received) / 2;
      result.error_us = (round_trip + 1) / 2;
    }
  }
  const int64_t waiting = TraceNowMicros();
  int64_t sent = 0;
  RETURN_IF_ERROR(MpiStatus(MPI_Recv(&sent, 1, MPI_INT64_T, 0, kFlowTag, comm, MPI_STATUS_IGNORE),
                            "MPI_Recv (ping)"));
  const int64_t received = TraceNowMicros();
  if (trace != nullptr) {
    trace->Complete(kClockTraceThread, "ping received", "clock", waiting, received,
                    TraceArgs().Add("from_rank", 0).Add("sent_us_on_rank0", sent));
    trace->FlowEnd(kClockTraceThread, "ping", FlowId(rank, sequence), received);
  }
  return result;
}

}  // namespace stoker::trainer
