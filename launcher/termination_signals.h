// Catching the signals that ask the launcher to stop (SIGINT, SIGTERM, SIGHUP, SIGUSR1,
// SIGUSR2) so that it can end the job in order instead of dying with its children still
// running.
#ifndef STOKER_LAUNCHER_TERMINATION_SIGNALS_H_
#define STOKER_LAUNCHER_TERMINATION_SIGNALS_H_

#include <signal.h>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "common/unique_fd.h"

namespace stoker::launcher {

// While it lives, SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 (Slurm's warning before the
// time limit, `--signal=B:USR1@120`) no longer end the process: each one becomes a
// byte on a pipe (the self-pipe trick), so a poll loop can watch wake_fd() next to its
// children. The destructor restores the previous handlers. At most one instance exists at a
// time (Install fails with FailedPrecondition otherwise). Move-only; not thread-safe, but
// the handler itself is async-signal-safe.
//
//   ASSIGN_OR_RETURN(TerminationSignals signals, TerminationSignals::Install());
//   ... WaitForFirstExit(children, timeout, signals.wake_fd()) ...
//   if (absl::optional<int> signal = signals.Take()) { ... 128 + *signal ... }
class TerminationSignals {
 public:
  static absl::StatusOr<TerminationSignals> Install();

  TerminationSignals(TerminationSignals&& other) noexcept;
  TerminationSignals& operator=(TerminationSignals&& other) noexcept;
  TerminationSignals(const TerminationSignals&) = delete;
  TerminationSignals& operator=(const TerminationSignals&) = delete;
  ~TerminationSignals();

  // Readable while a caught signal has not been taken.
  int wake_fd() const { return read_end_.get(); }

  // The signals caught while an instance lives.
  static constexpr int kCaught[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
  static constexpr int kNumCaught = sizeof(kCaught) / sizeof(kCaught[0]);

  // Drains the pipe. Returns the first signal caught since Install (the same one on every
  // later call), or nullopt when none came yet.
  absl::optional<int> Take();

 private:
  TerminationSignals(UniqueFd read_end, UniqueFd write_end)
      : read_end_(std::move(read_end)), write_end_(std::move(write_end)) {}
  void Uninstall();

  UniqueFd read_end_;
  UniqueFd write_end_;
  struct sigaction previous_[kNumCaught] = {};
  bool installed_ = false;
  int handlers_set_ = 0;  // previous_[0, handlers_set_) hold what to restore
  absl::optional<int> first_signal_;
};

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_TERMINATION_SIGNALS_H_
