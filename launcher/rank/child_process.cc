#include "launcher/rank/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/status_macros.h"

extern char** environ;

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // Linux 5.3; the same number on every architecture.
#endif

namespace stoker::launcher {
namespace {

// How long a SIGKILLed child may take to be reaped before we give up on it.
constexpr absl::Duration kKillReapTimeout = absl::Seconds(5);
// How often WaitForFirstExit checks children when the kernel has no pidfds.
constexpr absl::Duration kPollTick = absl::Milliseconds(10);

std::atomic<bool> pidfds_enabled{true};

// Written by the child to the exec-error pipe when it fails before or in execve.
struct ChildSetupError {
  int step;  // index into kChildSetupSteps
  int error;
};
constexpr const char* kChildSetupSteps[] = {"setpgid", "prctl(PR_SET_PDEATHSIG)", "dup2(stdin)",
                                            "execve"};

const char* SignalName(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    default:
      return nullptr;
  }
}

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1));
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 0, INT_MAX));
}

// Runs in the forked child: only async-signal-safe calls from here to execve.
[[noreturn]] void ExecChild(const char* program, char* const* argv, char* const* envp, pid_t parent,
                            int stdin_fd, int error_fd, int death_signal, const cpu_set_t* cpus,
                            bool ignore_sigpipe) {
  auto fail = [error_fd](int step) {
    ChildSetupError report{step, errno};
    ssize_t ignored = write(error_fd, &report, sizeof(report));
    (void)ignored;
    _exit(127);
  };
  if (setpgid(0, 0) != 0) fail(0);
  if (prctl(PR_SET_PDEATHSIG, death_signal) != 0) fail(1);
  // The parent may have died before prctl took effect; then nobody would kill us.
  if (getppid() != parent) _exit(127);
  // Handlers the parent installed would run here with the parent's state (its signal
  // pipe); ignored signals stay ignored, as a shell does it.
  for (int signal = 1; signal < NSIG; ++signal) {
    struct sigaction action;
    if (sigaction(signal, nullptr, &action) != 0) continue;
    if (action.sa_handler == SIG_DFL || action.sa_handler == SIG_IGN) continue;
    action.sa_handler = SIG_DFL;
    action.sa_flags = 0;
    sigaction(signal, &action, nullptr);
  }
  if (ignore_sigpipe) {
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, nullptr);
  }
  if (dup2(stdin_fd, STDIN_FILENO) < 0) fail(2);
  // Best effort: the kernel keeps the CPUs the cgroup allows; nothing to do if it refuses.
  if (cpus != nullptr) sched_setaffinity(0, sizeof(*cpus), cpus);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(program, argv, envp);
  fail(3);
  _exit(127);
}

std::vector<char*> NullTerminated(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

struct ChildEntry {
  pid_t pid;
  bool zombie;
};

// Returns this process's children, zombies included, from /proc/<pid>/stat.
std::vector<ChildEntry> ListChildren() {
  std::vector<ChildEntry> children;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    char stat[512];
    const ssize_t length = read(fd.get(), stat, sizeof(stat) - 1);
    if (length <= 0) continue;
    stat[length] = '\0';
    // "pid (comm) state ppid ...": comm may hold anything, so parse after the last ')'.
    const char* close_paren = std::strrchr(stat, ')');
    char state;
    long parent;
    if (close_paren == nullptr || std::sscanf(close_paren + 1, " %c %ld", &state, &parent) != 2) {
      continue;
    }
    if (parent == self) children.push_back({static_cast<pid_t>(pid), state == 'Z'});
  }
  closedir(proc);
  return children;
}

}  // namespace

std::string DescribeSignal(int signal) {
  const char* name = SignalName(signal);
  return name == nullptr ? absl::StrCat("signal ", signal)
                         : absl::StrCat("signal ", signal, " (", name, ")");
}

ExitStatus ExitStatus::FromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return Exited(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return Signaled(WTERMSIG(wait_status));
  return Lost();
}

int ExitStatus::ShellCode() const {
  switch (kind_) {
    case Kind::kExited:
      return value_;
    case Kind::kSignaled:
      return 128 + value_;
    case Kind::kLost:
      return 1;
  }
  return 1;
}

std::string ExitStatus::ToString() const {
  switch (kind_) {
    case Kind::kExited:
      return absl::StrCat("exited with code ", value_);
    case Kind::kSignaled:
      return absl::StrCat("killed by ", DescribeSignal(value_));
    case Kind::kLost:
      return "ended, but its exit status was lost (reaped elsewhere)";
  }
  return "";
}

absl::StatusOr<bool> BecomeChildSubreaper() {
  int previous = 0;
  if (prctl(PR_GET_CHILD_SUBREAPER, &previous) != 0) {
    return ErrnoToStatus(errno, "prctl(PR_GET_CHILD_SUBREAPER)");
  }
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return ErrnoToStatus(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  }
  return previous != 0;
}

void RestoreChildSubreaper(bool previous) { prctl(PR_SET_CHILD_SUBREAPER, previous ? 1 : 0); }

std::vector<pid_t> KillStrayChildren(absl::Span<const pid_t> keep, absl::Duration grace,
                                     absl::Duration timeout) {
  std::vector<pid_t> killed;
  const absl::Time kill_from = absl::Now() + grace;
  const absl::Time deadline = kill_from + timeout;
  while (true) {
    std::vector<ChildEntry> strays = ListChildren();
    strays.erase(std::remove_if(strays.begin(), strays.end(),
                                [keep](const ChildEntry& child) {
                                  return std::find(keep.begin(), keep.end(), child.pid) !=
                                         keep.end();
                                }),
                 strays.end());
    if (strays.empty()) return killed;
    const bool kill_now = absl::Now() >= kill_from;
    for (const ChildEntry& child : strays) {
      if (!child.zombie && kill_now) {
        // Our child and not reaped yet, so the pid (and a group it leads) is still its own.
        if (getpgid(child.pid) == child.pid) kill(-child.pid, SIGKILL);
        kill(child.pid, SIGKILL);
        if (std::find(killed.begin(), killed.end(), child.pid) == killed.end()) {
          killed.push_back(child.pid);
        }
      }
      while (waitpid(child.pid, nullptr, WNOHANG) < 0 && errno == EINTR) {
      }
    }
    if (absl::Now() >= deadline) {
      LogError("stray child processes still there after %s: %d left",
               absl::FormatDuration(grace + timeout), static_cast<int>(strays.size()));
      return killed;
    }
    absl::SleepFor(kPollTick);
  }
}

namespace internal {

std::vector<std::string> MergeEnvironment(absl::Span<const std::string> environment,
                                          absl::Span<const std::string> overrides) {
  std::vector<std::string> merged(environment.begin(), environment.end());
  for (const std::string& entry : overrides) {
    absl::string_view name(entry);
    name = name.substr(0, name.find('='));
    auto same_name = [name](const std::string& existing) {
      return existing.size() > name.size() && existing[name.size()] == '=' &&
             absl::string_view(existing).substr(0, name.size()) == name;
    };
    auto it = std::find_if(merged.begin(), merged.end(), same_name);
    if (it == merged.end()) {
      merged.push_back(entry);
    } else {
      *it = entry;
    }
  }
  return merged;
}

void SetPidfdsEnabledForTesting(bool enabled) { pidfds_enabled = enabled; }

}  // namespace internal

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const ChildSpec& spec) {
  if (spec.program.find('/') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot start ", spec.name, ": program '", spec.program, "' is not a path"));
  }
  for (const std::string& entry : spec.env) {
    if (entry.find('=') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot start ", spec.name, ": environment entry '", entry, "' is not NAME=VALUE"));
    }
  }
  // Everything the child uses is made before fork: between fork and execve the child may
  // only call async-signal-safe functions, so it must not allocate.
  std::vector<std::string> argv =
      spec.argv.empty() ? std::vector<std::string>{spec.program} : spec.argv;
  std::vector<std::string> inherited;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    inherited.emplace_back(*entry);
  }
  std::vector<std::string> env = internal::MergeEnvironment(inherited, spec.env);
  std::vector<char*> argv_pointers = NullTerminated(argv);
  std::vector<char*> env_pointers = NullTerminated(env);

  cpu_set_t all_cpus;
  CPU_ZERO(&all_cpus);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &all_cpus);
  UniqueFd dev_null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return ErrnoToStatus(errno, "open /dev/null");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  UniqueFd error_read(pipe_fds[0]);
  UniqueFd error_write(pipe_fds[1]);

  // No signal handler may run in the child between fork and execve.
  sigset_t all_signals, saved_mask;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &saved_mask);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    ExecChild(spec.program.c_str(), argv_pointers.data(), env_pointers.data(), parent,
              dev_null.get(), error_write.get(), spec.parent_death_signal,
              spec.use_all_cpus ? &all_cpus : nullptr, spec.ignore_sigpipe);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  if (pid < 0) return ErrnoToStatus(fork_errno, absl::StrCat("fork for ", spec.name));
  // Also from this side, so the group exists before Spawn returns and a signal to it cannot
  // miss the child. EACCES once the child has executed: it did setpgid itself by then.
  setpgid(pid, pid);
  error_write.Reset();

  ChildSetupError report{};
  ssize_t got;
  do {
    got = read(error_read.get(), &report, sizeof(report));
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof(report))) {
    int ignored;
    while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    const int step = std::clamp(report.step, 0, 3);
    return ErrnoToStatus(report.error, absl::StrCat("cannot start ", spec.name, " (", spec.program,
                                                    "): ", kChildSetupSteps[step]));
  }

  // Where the kernel is older than 5.3 there is no pidfd and waits fall back to polling.
  UniqueFd pidfd;
  if (pidfds_enabled) pidfd.Reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  return ChildProcess(pid, spec.name, std::move(pidfd));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      name_(std::move(other.name_)),
      pidfd_(std::move(other.pidfd_)),
      exit_status_(std::exchange(other.exit_status_, absl::nullopt)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    KillAndReap();
    pid_ = std::exchange(other.pid_, -1);
    name_ = std::move(other.name_);
    pidfd_ = std::move(other.pidfd_);
    exit_status_ = std::exchange(other.exit_status_, absl::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() { KillAndReap(); }

void ChildProcess::KillAndReap() {
  if (pid_ < 0 || exit_status_.has_value()) return;
  kill(-pid_, SIGKILL);
  absl::StatusOr<ExitStatus> status = Wait(kKillReapTimeout);
  if (!status.ok()) {
    LogError("could not reap %s after SIGKILL: %s", Describe(), status.status().ToString());
  }
}

std::string ChildProcess::Describe() const { return absl::StrCat(name_, " (pid ", pid_, ")"); }

absl::optional<ExitStatus> ChildProcess::Poll() {
  if (exit_status_.has_value() || pid_ < 0) return exit_status_;
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int rc;
  do {
    rc = waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    LogError("waitid for %s: %s", Describe(), std::strerror(errno));
    exit_status_ = ExitStatus::Lost();
    pidfd_.Reset();
    return exit_status_;
  }
  if (info.si_pid == 0) return absl::nullopt;
  // Note [Group sweep before reap]: the child has exited but is not reaped yet, so its pid,
  // and with it the process group id, cannot have been reused. Whatever of its group is
  // still alive (a rank mpirun left behind, a shell's background job) is killed now, while
  // the id still names that group for certain.
  kill(-pid_, SIGKILL);
  int wait_status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid_, &wait_status, 0);
  } while (reaped < 0 && errno == EINTR);
  exit_status_ = reaped == pid_ ? ExitStatus::FromWaitStatus(wait_status) : ExitStatus::Lost();
  pidfd_.Reset();
  return exit_status_;
}

absl::StatusOr<ExitStatus> ChildProcess::Wait(absl::Duration timeout) {
  ChildProcess* self = this;
  ASSIGN_OR_RETURN(WaitResult result, WaitForFirstExit({&self, 1}, timeout));
  if (result.event != WaitResult::Event::kExited) {
    return absl::DeadlineExceededError(
        absl::StrCat(Describe(), " still runs after ", absl::FormatDuration(timeout)));
  }
  return *exit_status_;
}

absl::Status ChildProcess::SignalGroup(int signal) {
  if (pid_ < 0 || exit_status_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(Describe(), " has already exited"));
  }
  if (kill(-pid_, signal) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("kill(-", pid_, ", ", signal, ") for ", name_));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExitStatus> ChildProcess::Terminate(absl::Duration grace) {
  ChildProcess* self = this;
  RETURN_IF_ERROR(TerminateAll({&self, 1}, grace));
  return *exit_status_;
}

absl::StatusOr<WaitResult> WaitForFirstExit(absl::Span<ChildProcess* const> children,
                                            absl::Duration timeout, int wake_fd) {
  if (children.empty()) return absl::InvalidArgumentError("WaitForFirstExit: no children");
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  std::vector<pollfd> fds;
  while (true) {
    for (ChildProcess* child : children) {
      if (child->Poll().has_value()) return WaitResult{WaitResult::Event::kExited, child};
    }
    if (!fds.empty() && wake_fd >= 0 && fds[0].revents != 0) {
      return WaitResult{WaitResult::Event::kWoken, nullptr};
    }
    if (absl::Now() >= deadline) return WaitResult{WaitResult::Event::kTimedOut, nullptr};

    fds.clear();
    bool needs_tick = false;
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    for (ChildProcess* child : children) {
      if (child->pidfd() >= 0) {
        fds.push_back({child->pidfd(), POLLIN, 0});
      } else {
        needs_tick = true;
      }
    }
    int timeout_ms = PollTimeoutMs(deadline);
    if (needs_tick) {
      const int tick_ms = static_cast<int>(absl::ToInt64Milliseconds(kPollTick));
      timeout_ms = timeout_ms < 0 ? tick_ms : std::min(timeout_ms, tick_ms);
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno != EINTR) return ErrnoToStatus(errno, "poll for child processes");
      for (pollfd& fd : fds) fd.revents = 0;
    }
  }
}

absl::Status TerminateAll(absl::Span<ChildProcess* const> children, absl::Duration grace,
                          int wake_fd) {
  std::vector<ChildProcess*> running;
  for (ChildProcess* child : children) {
    if (!child->Poll().has_value()) running.push_back(child);
  }
  for (ChildProcess* child : running) {
    absl::Status sent = child->SignalGroup(SIGTERM);
    if (!sent.ok()) LogWarning("SIGTERM to %s: %s", child->Describe(), sent.ToString());
    // A stopped child (SIGSTOP) would hold its SIGTERM until continued and get SIGKILL
    // after the grace, with no chance to remove what it made: continue it.
    (void)child->SignalGroup(SIGCONT);
  }

  auto wait_for_all = [&running](absl::Time deadline, int wake) -> absl::StatusOr<bool> {
    while (!running.empty()) {
      const absl::Time now = absl::Now();
      if (now >= deadline) return false;
      ASSIGN_OR_RETURN(WaitResult result, WaitForFirstExit(running, deadline - now, wake));
      if (result.event != WaitResult::Event::kExited) return false;
      running.erase(std::find(running.begin(), running.end(), result.child));
    }
    return true;
  };

  ASSIGN_OR_RETURN(bool all_exited, wait_for_all(absl::Now() + grace, wake_fd));
  if (all_exited) return absl::OkStatus();
  for (ChildProcess* child : running) {
    LogWarning("%s did not exit after SIGTERM; sending SIGKILL to its process group",
               child->Describe());
    absl::Status sent = child->SignalGroup(SIGKILL);
    if (!sent.ok()) LogWarning("SIGKILL to %s: %s", child->Describe(), sent.ToString());
  }
  ASSIGN_OR_RETURN(all_exited, wait_for_all(absl::Now() + kKillReapTimeout, -1));
  if (all_exited) return absl::OkStatus();
  std::vector<std::string> names;
  for (ChildProcess* child : running) names.push_back(child->Describe());
  return absl::DeadlineExceededError(absl::StrCat("still not reaped ",
                                                  absl::FormatDuration(kKillReapTimeout),
                                                  " after SIGKILL: ", absl::StrJoin(names, ", ")));
}

}  // namespace stoker::launcher
