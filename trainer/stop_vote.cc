#include "trainer/stop_vote.h"

#include <signal.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "trainer/stop_signal.h"

namespace stoker::trainer {
namespace {

// How long a rank whose data service is gone waits for a stop signal before it calls that a
// failure: mpirun passes SIGTERM on to the ranks after a second, and a loaded node may take
// another; no longer, since it delays the end of a job that lost its data service.
constexpr absl::Duration kStopSignalGrace = absl::Seconds(3);

// One counter per stop signal, in order of precedence, then "no batch", one counter per
// cause of the table in common/exit_codes.h, so that every rank fails with the code of
// the cause (a lost peer is the least specific: the others can make a rank lose its peers).
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR2, SIGUSR1};
constexpr int kSignalCount = sizeof(kSignals) / sizeof(kSignals[0]);
constexpr int kCauses[] = {kExitBadData, kExitUsage,   kExitCheckpointIo,
                           kExitTimeout, kExitFailure, kExitPeerLost};
constexpr int kCauseCount = sizeof(kCauses) / sizeof(kCauses[0]);

// The counter of `local`'s cause (kExitFailure's for a code outside kCauses).
int CauseIndex(const absl::Status& local) {
  const int code = ExitCodeOf(local);
  for (int i = 0; i < kCauseCount; ++i) {
    if (kCauses[i] == code) return i;
  }
  for (int i = 0; i < kCauseCount; ++i) {
    if (kCauses[i] == kExitFailure) return i;
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> AgreeOnStop(Communicator& host, const absl::Status& local) {
  if (absl::IsUnavailable(local) && StopSignalReceived() == 0) {
    const absl::Time deadline = absl::Now() + kStopSignalGrace;
    while (StopSignalReceived() == 0 && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(10));
  }
  const int received = StopSignalReceived();
  int64_t votes[kSignalCount + kCauseCount] = {};
  for (int i = 0; i < kSignalCount; ++i) votes[i] = received == kSignals[i] ? 1 : 0;
  if (!local.ok()) votes[kSignalCount + CauseIndex(local)] = 1;
  if (host.world_size() > 1) {
    RETURN_IF_ERROR(
        host.AllReduce(votes, kSignalCount + kCauseCount, ElementType::kInt64, ReduceOp::kSum));
    RETURN_IF_ERROR(host.Synchronize());
  }
  for (int i = 0; i < kSignalCount; ++i) {
    if (votes[i] == 0) continue;
    if (!local.ok()) LogWarning("stopping; this rank had no next batch: %s", local.message());
    return kSignals[i];
  }
  if (!local.ok()) return local;
  for (int i = 0; i < kCauseCount; ++i) {
    if (votes[kSignalCount + i] == 0) continue;
    return AsPeerFailure(WithExitCode(
        absl::UnavailableError(absl::StrCat("another rank could not get its next batch (",
                                            ExitCause(kCauses[i]), "; its log says why)")),
        kCauses[i]));
  }
  return 0;
}

}  // namespace stoker::trainer
