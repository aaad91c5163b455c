#include "data_service/serve.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/shm_segment.h"
#include "common/trace_events.h"
#include "common/unique_fd.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/sandbox.h"
#include "data_service/service.h"

namespace stoker::data_service {
namespace {

// Removes the directory of `socket_path` when it is empty; another node's socket in it (two
// nodes of one job on one machine) keeps it.
void RemoveSocketDirectoryIfEmpty(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  if (slash == std::string::npos || slash == 0) return;
  const std::string dir = socket_path.substr(0, slash);
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST) {
    LogWarning("cannot remove the socket's directory %s: %s", dir, std::strerror(errno));
  }
}

// A refusal of the options the flags gave is a usage error (exit 2).
absl::Status AsUsageError(absl::Status status) {
  return WithExitCode(std::move(status), kExitUsage);
}

// Waits for SIGTERM or SIGINT (blocked in `signals`) while the service stays healthy.
// OK on a signal; the service's failure otherwise.
absl::Status ServeUntilSignal(DataService& service, const sigset_t& signals) {
  while (true) {
    const timespec one_second{1, 0};
    const int signal = sigtimedwait(&signals, nullptr, &one_second);
    if (signal == SIGTERM || signal == SIGINT) {
      LogInfo("%s: shutting down", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      return absl::OkStatus();
    }
    if (absl::Status health = service.health(); !health.ok()) {
      return absl::Status(health.code(), absl::StrCat("cannot serve any more: ", health.message()));
    }
  }
}

// The sandbox's two layers (Note [Sandbox layers] in data_service/sandbox.h), each applied
// where the kernel allows; what could not be applied is logged once, and with
// --require_sandbox fails the start (exit 2).
class Sandboxing {
 public:
  explicit Sandboxing(const DataServiceOptions& options) : options_(options) {}

  // Landlock, while this is the process's only thread.
  absl::Status RestrictFiles() {
    if (!on()) return absl::OkStatus();
    SandboxPaths paths;
    paths.socket_path = options_.service.socket_path;
    paths.owner_record = options_.owner_record;
    paths.remove_socket_dir = options_.remove_socket_dir;
    absl::StatusOr<int> abi = data_service::RestrictFiles(paths);
    if (abi.ok()) {
      files_ = absl::StrCat("Landlock ABI ", *abi,
                            ": files made, written and removed only under /dev/shm, the "
                            "socket's directory for its socket, nothing executed",
                            *abi >= 6 ? ", signals only within the sandbox" : "");
      files_confined_ = true;
      return absl::OkStatus();
    }
    files_ = absl::StrCat("no Landlock (", abi.status().message(),
                          "): new files can be made and files removed anywhere the user can");
    return Required(abi.status(), "Landlock");
  }

  // The seccomp allowlist, on every thread, and the log line saying what is on.
  absl::Status FilterSystemCalls() {
    if (!options_.sandbox) {
      LogWarning(
          "sandbox off (--nosandbox): a decoder bug exploited by a crafted image runs "
          "with every right of this user");
      return absl::OkStatus();
    }
    const absl::Status filtered = data_service::FilterSystemCalls();
    const std::string calls =
        filtered.ok()
            ? absl::StrCat("seccomp allowlist of ", SandboxAllowedSyscalls().size(),
                           " system calls (no execve, fork, namespaces, sockets, io_uring, "
                           "ptrace, process_vm_*; EPERM)")
            : absl::StrCat("no seccomp filter (", filtered.message(), ")");
    if (filtered.ok() && files_confined_) {
      LogInfo("sandbox on: %s; %s", calls, files_);
    } else if (filtered.ok()) {
      LogWarning("sandbox on: %s; %s", calls, files_);
    } else {
      LogWarning("sandbox incomplete: %s; %s", calls, files_);
    }
    return Required(filtered, "seccomp");
  }

 private:
  bool on() const { return options_.sandbox; }

  absl::Status Required(const absl::Status& status, const char* layer) const {
    if (status.ok() || !options_.require_sandbox) return absl::OkStatus();
    return AsUsageError(absl::FailedPreconditionError(
        absl::StrCat("--require_sandbox: cannot apply ", layer, ": ", status.message())));
  }

  const DataServiceOptions& options_;
  std::string files_;  // what Landlock does, or why it could not
  bool files_confined_ = false;
};

}  // namespace

ServeOutcome ServeUntilStopped(const DataServiceOptions& options) {
  ServeOutcome outcome;
  // Block the termination signals in every thread; this thread takes them with
  // sigtimedwait. Threads created below inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Note [Truncated shared memory] in common/shm_segment.h.
  if (absl::Status guarded = InstallTruncatedSharedMemoryGuard(
          kExitPeerLost, absl::StrCat("data_service node ", options.service.node_id));
      !guarded.ok()) {
    outcome.status = guarded;
    return outcome;
  }

  // A traced service's file is opened now, before the sandbox stops new files (Note [Trace
  // file before the sandbox] in common/trace_events.h).
  ServiceOptions service_options = options.service;
  if (!service_options.trace_dir.empty()) {
    absl::StatusOr<UniqueFd> trace_file = OpenTraceFile(DataServiceTracePath(service_options));
    if (!trace_file.ok()) {
      outcome.status = AsUsageError(absl::Status(
          trace_file.status().code(), absl::StrCat("--trace: ", trace_file.status().message())));
      return outcome;
    }
    service_options.trace_file = std::make_shared<UniqueFd>(std::move(*trace_file));
  }

  Sandboxing sandboxing(options);
  if (absl::Status restricted = sandboxing.RestrictFiles(); !restricted.ok()) {
    outcome.status = restricted;
    return outcome;
  }

  absl::StatusOr<Datasets> datasets = OpenDatasets(options.dataset);
  if (!datasets.ok()) {
    const bool usage =
        absl::IsInvalidArgument(datasets.status()) || absl::IsNotFound(datasets.status());
    outcome.status = usage ? AsUsageError(datasets.status()) : datasets.status();
    return outcome;
  }
  absl::StatusOr<std::unique_ptr<DataService>> service =
      DataService::Start(service_options, std::move(*datasets));
  if (!service.ok()) {
    const bool usage = absl::IsInvalidArgument(service.status());
    outcome.status = usage ? AsUsageError(service.status()) : service.status();
    return outcome;
  }

  if (absl::Status filtered = sandboxing.FilterSystemCalls(); !filtered.ok()) {
    (void)(*service)->Shutdown();
    outcome.status = filtered;
    return outcome;
  }

  outcome.status = ServeUntilSignal(**service, signals);
  const absl::Status stopped = (*service)->Shutdown();
  if (!stopped.ok()) {
    // The first failure is the outcome (main() reports it); a later one is logged here.
    if (outcome.status.ok()) {
      outcome.status = stopped;
    } else {
      LogWarning("the shutdown failed too: %s", StatusText(stopped));
    }
    outcome.decodes_abandoned = true;
  }
  if (options.remove_socket_dir) RemoveSocketDirectoryIfEmpty(options.service.socket_path);
  if (!options.owner_record.empty()) {
    if (unlink(options.owner_record.c_str()) != 0 && errno != ENOENT) {
      LogWarning("cannot remove the job owner record %s: %s", options.owner_record,
                 std::strerror(errno));
    }
  }
  return outcome;
}

}  // namespace stoker::data_service
