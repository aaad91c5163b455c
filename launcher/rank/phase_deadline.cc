#include "launcher/rank/phase_deadline.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/mpi_status.h"
#include "common/status_macros.h"

namespace stoker::launcher {
namespace {

// How long a rank waits for rank 0's answer after its own deadline (rank 0 answers at its
// deadline, which may come a little later than this rank's).
constexpr absl::Duration kAnswerGrace = absl::Seconds(10);
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

// The tags of a phase's two messages, from its name (every rank computes the same).
int PhaseTag(absl::string_view phase) {
  uint32_t hash = 2166136261u;  // FNV-1a
  for (const char c : phase) hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
  return 20000 + static_cast<int>(hash % 5000) * 2;
}

// Ranks of `comm` as ranks of MPI_COMM_WORLD.
std::vector<int> WorldRanks(MPI_Comm comm, const std::vector<int>& ranks) {
  std::vector<int> world(ranks.size(), MPI_UNDEFINED);
  MPI_Group group, world_group;
  if (MPI_Comm_group(comm, &group) != MPI_SUCCESS) return ranks;
  if (MPI_Comm_group(MPI_COMM_WORLD, &world_group) != MPI_SUCCESS) {
    MPI_Group_free(&group);
    return ranks;
  }
  MPI_Group_translate_ranks(group, static_cast<int>(ranks.size()), ranks.data(), world_group,
                            world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

absl::Status Missing(absl::string_view phase, const std::vector<int>& world_ranks, int size,
                     absl::Duration timeout) {
  return absl::DeadlineExceededError(absl::StrCat(
      "start-up phase \"", phase, "\" was not reached by rank", world_ranks.size() > 1 ? "s " : " ",
      absl::StrJoin(world_ranks, ", "), " of ", size, " within ", absl::FormatDuration(timeout),
      " (stalled, hung or dead before it); ending the job"));
}

}  // namespace

absl::Status AwaitPhase(MPI_Comm comm, absl::string_view phase, absl::Duration timeout) {
  int rank = 0;
  int size = 1;
  RETURN_IF_MPI_ERROR(MPI_Comm_rank(comm, &rank));
  RETURN_IF_MPI_ERROR(MPI_Comm_size(comm, &size));
  if (size == 1) return absl::OkStatus();
  const int tag = PhaseTag(phase);
  const absl::Time deadline = absl::Now() + timeout;
  // The answer: the number of missing ranks, then their ranks in `comm`.
  std::vector<int> answer(size + 1, 0);
  if (rank == 0) {
    std::vector<int> arrival(size, 0);
    std::vector<MPI_Request> requests(size, MPI_REQUEST_NULL);
    for (int r = 1; r < size; ++r) {
      RETURN_IF_MPI_ERROR(MPI_Irecv(&arrival[r], 1, MPI_INT, r, tag, comm, &requests[r]));
    }
    std::vector<bool> arrived(size, false);
    arrived[0] = true;
    int missing = size - 1;
    while (missing > 0 && absl::Now() < deadline) {
      for (int r = 1; r < size; ++r) {
        if (arrived[r]) continue;
        int done = 0;
        RETURN_IF_MPI_ERROR(MPI_Test(&requests[r], &done, MPI_STATUS_IGNORE));
        if (done) {
          arrived[r] = true;
          --missing;
        }
      }
      if (missing > 0) absl::SleepFor(kPollInterval);
    }
    std::vector<int> absent;
    for (int r = 1; r < size; ++r) {
      if (!arrived[r]) absent.push_back(r);
    }
    answer[0] = static_cast<int>(absent.size());
    std::copy(absent.begin(), absent.end(), answer.begin() + 1);
    std::vector<MPI_Request> sends;
    for (int r = 1; r < size; ++r) {
      if (!arrived[r]) continue;
      sends.emplace_back();
      RETURN_IF_MPI_ERROR(
          MPI_Isend(answer.data(), answer[0] + 1, MPI_INT, r, tag + 1, comm, &sends.back()));
    }
    // Every rank that arrived has its receive posted: the answers complete at once.
    RETURN_IF_MPI_ERROR(
        MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE));
    if (absent.empty()) return absl::OkStatus();
    return Missing(phase, WorldRanks(comm, absent), size, timeout);
  }
  int here = rank;
  MPI_Request sent, received;
  RETURN_IF_MPI_ERROR(MPI_Isend(&here, 1, MPI_INT, 0, tag, comm, &sent));
  RETURN_IF_MPI_ERROR(MPI_Irecv(answer.data(), size + 1, MPI_INT, 0, tag + 1, comm, &received));
  const absl::Time give_up = deadline + kAnswerGrace;
  while (true) {
    int done = 0;
    RETURN_IF_MPI_ERROR(MPI_Test(&received, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (absl::Now() >= give_up) {
      const int root = WorldRanks(comm, {0})[0];
      return absl::DeadlineExceededError(absl::StrCat(
          "start-up phase \"", phase, "\": rank ", root,
          ", which collects the arrivals, did not answer within ",
          absl::FormatDuration(timeout + kAnswerGrace),
          " (it has not reached the phase: stalled, hung or dead before it); ending the job"));
    }
    absl::SleepFor(kPollInterval);
  }
  RETURN_IF_MPI_ERROR(MPI_Wait(&sent, MPI_STATUS_IGNORE));
  if (answer[0] == 0) return absl::OkStatus();
  return Missing(
      phase, WorldRanks(comm, std::vector<int>(answer.begin() + 1, answer.begin() + 1 + answer[0])),
      size, timeout);
}

PhaseDeadline::PhaseDeadline(std::string what, absl::Duration timeout)
    : what_(std::move(what)), timeout_(timeout), watchdog_([this] {
        if (done_.WaitForNotificationWithTimeout(timeout_)) return;
        LogError(
            "%s (exit %d): %s did not return within %s: another rank stalled or died, or "
            "the call hangs; exiting so that the job ends",
            ExitCause(kExitTimeout), kExitTimeout, what_, absl::FormatDuration(timeout_));
        std::fflush(stderr);
        std::_Exit(kExitTimeout);
      }) {}

PhaseDeadline::~PhaseDeadline() {
  done_.Notify();
  watchdog_.join();
}

}  // namespace stoker::launcher
