// Supervision of the launcher's child processes: each child runs in its own process group
// and dies with the launcher (PR_SET_PDEATHSIG); the launcher waits for the first of several
// children to exit, with a timeout, and ends a child's whole process group (SIGTERM, then
// SIGKILL after a grace period). ChildProcess owns one child and never lets it outlive it.
#ifndef STOKER_LAUNCHER_RANK_CHILD_PROCESS_H_
#define STOKER_LAUNCHER_RANK_CHILD_PROCESS_H_

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace stoker::launcher {

// "signal 9 (SIGKILL)"; "signal 40" for signals without a common name.
std::string DescribeSignal(int signal);

// How a child ended, as waitpid(2) reported it. Copyable value.
class ExitStatus {
 public:
  static ExitStatus Exited(int code) { return ExitStatus(Kind::kExited, code); }
  static ExitStatus Signaled(int signal) { return ExitStatus(Kind::kSignaled, signal); }
  // A child reaped by someone else (its status is lost), which only happens when another
  // part of the process calls wait(-1) or ignores SIGCHLD.
  static ExitStatus Lost() { return ExitStatus(Kind::kLost, 0); }
  // From the status word of waitpid(2).
  static ExitStatus FromWaitStatus(int wait_status);

  bool success() const { return kind_ == Kind::kExited && value_ == 0; }
  bool exited() const { return kind_ == Kind::kExited; }
  bool signaled() const { return kind_ == Kind::kSignaled; }
  int exit_code() const { return kind_ == Kind::kExited ? value_ : -1; }
  int signal() const { return kind_ == Kind::kSignaled ? value_ : 0; }

  // The code a shell reports for this status: the exit code, 128 + the signal, or 1 when
  // the status was lost.
  int ShellCode() const;
  // "exited with code 3", "killed by signal 9 (Killed)".
  std::string ToString() const;

  friend bool operator==(const ExitStatus& a, const ExitStatus& b) {
    return a.kind_ == b.kind_ && a.value_ == b.value_;
  }

 private:
  enum class Kind { kExited, kSignaled, kLost };
  ExitStatus(Kind kind, int value) : kind_(kind), value_(value) {}

  Kind kind_;
  int value_;
};

// What to start. Plain data.
struct ChildSpec {
  std::string name;               // what messages call it: "data service", "mpirun"
  std::string program;            // the file to execute; must contain a '/' (no PATH search)
  std::vector<std::string> argv;  // argv[0] included; argv = {program} when empty
  // NAME=VALUE entries set in the child over the launcher's own environment.
  std::vector<std::string> env;
  // Sent to the child when the thread that spawned it dies (PR_SET_PDEATHSIG). SIGTERM lets
  // a child that handles it clean up after itself (the data service does).
  int parent_death_signal = SIGKILL;
  // Whether the child may run on every CPU, instead of inheriting the parent's affinity (an
  // MPI rank bound to a core would otherwise pin the data service to that core too). The
  // kernel still keeps it inside the CPUs its cgroup allows.
  bool use_all_cpus = false;
  // Whether the child starts with SIGPIPE ignored (kept through execve). A child whose
  // output may outlive its reader (a rank's stderr is a pipe to mpirun, which may exit
  // first) then gets EPIPE from a log line instead of dying before its cleanup.
  bool ignore_sigpipe = false;
};

// One child process, in its own process group (pgid == pid), with stdin from /dev/null and
// a parent-death signal (SIGKILL unless the spec says otherwise). Move-only. The destructor
// SIGKILLs the group and reaps the child if it has not been reaped yet. Not thread-safe.
//
// PR_SET_PDEATHSIG fires when the *thread* that spawned the child exits: spawn from a
// thread that lives as long as the ChildProcess (the launcher spawns from main).
//
//   ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn({"sleeper", "/bin/sleep",
//                                                            {"sleep", "5"}}));
//   ASSIGN_OR_RETURN(ExitStatus status, child.Terminate(absl::Seconds(10)));
class ChildProcess {
 public:
  // Forks and executes `spec`. Fails (without leaving a child behind) when fork fails or the
  // program cannot be executed; the message names the child and the program.
  static absl::StatusOr<ChildProcess> Spawn(const ChildSpec& spec);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // "data service (pid 1234)".
  std::string Describe() const;

  // Whether the child has been reaped (by Poll, Wait, Terminate or WaitForFirstExit).
  bool has_exited() const { return exit_status_.has_value(); }
  const absl::optional<ExitStatus>& exit_status() const { return exit_status_; }

  // Reaps the child if it has exited and returns its status; nullopt while it runs. Never
  // blocks. Members of its process group that are still alive are SIGKILLed first (Note
  // [Group sweep before reap]).
  absl::optional<ExitStatus> Poll();

  // Waits up to `timeout` for the child to exit. DeadlineExceeded if it is still running.
  absl::StatusOr<ExitStatus> Wait(absl::Duration timeout);

  // Sends `signal` to the child's process group. FailedPrecondition once it was reaped.
  absl::Status SignalGroup(int signal);

  // Sends SIGTERM to the group, waits up to `grace`, then SIGKILLs the group and waits for
  // the child. Returns how it ended (also when it had ended already).
  absl::StatusOr<ExitStatus> Terminate(absl::Duration grace);

  // The pidfd of the child (readable once it exited), or -1 where the kernel has none.
  int pidfd() const { return pidfd_.get(); }

 private:
  ChildProcess(pid_t pid, std::string name, UniqueFd pidfd)
      : pid_(pid), name_(std::move(name)), pidfd_(std::move(pidfd)) {}

  // SIGKILLs the group and reaps the child, waiting at most a few seconds.
  void KillAndReap();

  pid_t pid_ = -1;
  std::string name_;
  UniqueFd pidfd_;
  absl::optional<ExitStatus> exit_status_;
};

// What WaitForFirstExit saw.
struct WaitResult {
  enum class Event {
    kExited,    // `child` has exited and was reaped
    kTimedOut,  // none exited within the timeout
    kWoken,     // `wake_fd` became readable (it is not drained)
  };
  Event event;
  ChildProcess* child = nullptr;  // set for kExited
};

// Waits until one of `children` exits, `timeout` passes, or `wake_fd` (when >= 0; e.g. a
// signal pipe) becomes readable. A child that had already exited is returned at once, the
// first in `children` order. Waits on pidfds with poll(2); where the kernel has no pidfds it
// checks every 10 ms. InvalidArgument when `children` is empty.
absl::StatusOr<WaitResult> WaitForFirstExit(absl::Span<ChildProcess* const> children,
                                            absl::Duration timeout, int wake_fd = -1);

// Ends every child in `children` that still runs, all at once: SIGTERM to each process
// group (and SIGCONT, so that a stopped child gets it), up to `grace` for all of them to
// exit, then SIGKILL to the groups of those left.
// When `wake_fd` becomes readable during the grace period (a second Ctrl-C), the SIGKILL
// comes at once. Logs which children needed SIGKILL. DeadlineExceeded, naming them, if some
// child is not reaped a few seconds after SIGKILL.
absl::Status TerminateAll(absl::Span<ChildProcess* const> children, absl::Duration grace,
                          int wake_fd = -1);

// Note [Stray children]
// Open MPI puts every rank in a process group of its own, so signalling mpirun's group
// reaches mpirun only; mpirun forwards SIGTERM to its ranks. If mpirun dies without doing so
// (SIGKILL, a crash), its ranks become orphans. A process that is a child subreaper
// (PR_SET_CHILD_SUBREAPER) adopts the orphans of its descendants instead of init, so they
// show up as its own children, which KillStrayChildren then finds and ends.

// Makes this process adopt the orphaned processes among its descendants (process-wide, until
// the returned previous setting is restored with RestoreChildSubreaper).
absl::StatusOr<bool> BecomeChildSubreaper();
void RestoreChildSubreaper(bool previous);

// Reaps every child process of this process whose pid is not in `keep`, and the children
// those leave behind: each gets `grace` to exit by itself (a process on its way out, such as
// the daemon that Open MPI starts for a rank run without mpirun, which ends just after its
// rank), then SIGKILL; gives up `timeout` after the grace. Returns the pids it killed. Call
// it once every ChildProcess has been reaped: what is left then is stray (Note [Stray
// children]).
std::vector<pid_t> KillStrayChildren(absl::Span<const pid_t> keep, absl::Duration grace,
                                     absl::Duration timeout);

namespace internal {

// Returns `environment` with the NAME=VALUE entries of `overrides` replacing entries of the
// same name (in place) or appended (in `overrides` order).
std::vector<std::string> MergeEnvironment(absl::Span<const std::string> environment,
                                          absl::Span<const std::string> overrides);

// Makes Spawn skip pidfd_open, as on kernels older than 5.3, so that tests cover the
// polling fallback. Call before spawning.
void SetPidfdsEnabledForTesting(bool enabled);

}  // namespace internal
}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_CHILD_PROCESS_H_
