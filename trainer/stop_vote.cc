#include "trainer/stop_vote.h"

#include <signal.h>

#include <cstdint>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "trainer/stop_signal.h"

namespace stoker::trainer {
namespace {

// How long a rank whose data service is gone waits for a stop signal before it calls that a
// failure (mpirun passes SIGTERM on to the ranks after a second).
constexpr absl::Duration kStopSignalGrace = absl::Seconds(5);

// One counter per stop signal, in order of precedence, then "no batch".
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR2, SIGUSR1};
constexpr int kSignalCount = sizeof(kSignals) / sizeof(kSignals[0]);

}  // namespace

absl::StatusOr<int> AgreeOnStop(Communicator& host, const absl::Status& local) {
  if (absl::IsUnavailable(local) && StopSignalReceived() == 0) {
    const absl::Time deadline = absl::Now() + kStopSignalGrace;
    while (StopSignalReceived() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  }
  const int received = StopSignalReceived();
  int64_t votes[kSignalCount + 1] = {};
  for (int i = 0; i < kSignalCount; ++i) votes[i] = received == kSignals[i] ? 1 : 0;
  votes[kSignalCount] = local.ok() ? 0 : 1;
  if (host.world_size() > 1) {
    RETURN_IF_ERROR(host.AllReduce(votes, kSignalCount + 1, ElementType::kInt64, ReduceOp::kSum));
    RETURN_IF_ERROR(host.Synchronize());
  }
  for (int i = 0; i < kSignalCount; ++i) {
    if (votes[i] == 0) continue;
    if (!local.ok()) LogWarning("stopping; this rank had no next batch: %s", local.message());
    return kSignals[i];
  }
  if (!local.ok()) return local;
  if (votes[kSignalCount] > 0) {
    return absl::UnavailableError("another rank could not get its next batch (its log says why)");
  }
  return 0;
}

}  // namespace stoker::trainer
