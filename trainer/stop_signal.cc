#include "trainer/stop_signal.h"

#include <errno.h>
#include <signal.h>

#include <atomic>

#include "common/errno_status.h"

namespace stoker::trainer {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

void OnStopSignal(int signal_number) {
  int expected = 0;
  g_stop_signal.compare_exchange_strong(expected, signal_number);
  // Only the first one of each kind is graceful: the same signal again ends the process the
  // default way. (Another kind while stopping changes nothing.)
  signal(signal_number, SIG_DFL);
}

}  // namespace

absl::Status InstallStopSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal_number : kStopSignals) {
    if (sigaction(signal_number, &action, nullptr) != 0) {
      return ErrnoToStatus(errno, "sigaction for the stop signals");
    }
  }
  return absl::OkStatus();
}

int StopSignalReceived() { return g_stop_signal.load(std::memory_order_relaxed); }

void SetStopSignalForTest(int signal_number) { g_stop_signal.store(signal_number); }

}  // namespace stoker::trainer
