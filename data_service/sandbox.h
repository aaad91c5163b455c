// The data service's sandbox, on by default (--nosandbox turns it off): the service parses
// images nobody vetted, so code that a crafted image gets running in a decode thread must
// not reach beyond reading files and filling the rings. Two kernel layers:
//  - Landlock (Linux 5.13+, when the kernel enables it): files may be created, written,
//    truncated and removed only under the rings' directory (/dev/shm); the socket's
//    directory allows its socket to be made and removed, the owner record's directory its
//    removal; nothing may be executed. Reading is left open (a dataset's links may point
//    anywhere), and with no way to open a socket what is read can go only to the trainer.
//    From ABI 6 on, signals to processes outside the sandbox are refused too.
//  - seccomp-BPF, an allowlist of the system calls the service makes once running (every
//    thread, SECCOMP_FILTER_FLAG_TSYNC, with PR_SET_NO_NEW_PRIVS). Argument checks: open
//    only read-only or a new file (O_CREAT|O_EXCL, never O_TRUNC: no existing file opened
//    for writing), no PROT_EXEC mapping, clone only for threads (no fork, no namespaces),
//    signals only to this process, fchmod only to 0600, ioctl only terminal queries. Not
//    allowed, among others: execve, io_uring_*, ptrace, process_vm_readv/writev, socket,
//    connect, bind, unshare, setns, mount, rename, link, chmod, memfd_create, bpf.
//    A refused call fails with EPERM (clone3 with ENOSYS, so that glibc falls back to
//    clone); a call through another architecture's ABI kills the process (SIGSYS) after
//    the line "data service on <host> killed by its sandbox (syscall N, ...)".
// Note [Sandbox layers]: Landlock confines the calling thread and the threads it starts
// later, so RestrictFiles() runs while the service has one thread, before the datasets are
// opened; the seccomp filter reaches every thread at once, so FilterSystemCalls() runs
// after the service has started (socket bound, threads up). Neither adds a system call
// per sample.
#ifndef STOKER_DATA_SERVICE_SANDBOX_H_
#define STOKER_DATA_SERVICE_SANDBOX_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::data_service {

// What this kernel offers the sandbox. Plain data.
struct SandboxSupport {
  bool seccomp = false;
  std::string seccomp_missing;   // why not, when !seccomp
  int landlock_abi = 0;          // 0: no Landlock
  std::string landlock_missing;  // why not, when landlock_abi == 0
};

// Asks the kernel, changing nothing (prctl(PR_GET_SECCOMP), seccomp's
// SECCOMP_GET_ACTION_AVAIL, landlock_create_ruleset's version query).
SandboxSupport ProbeSandboxSupport();

// One line for logs and `launcher doctor`: "seccomp filters and Landlock ABI 7",
// "seccomp filters; no Landlock (...)", ...
std::string DescribeSandboxSupport(const SandboxSupport& support);

// The paths the service writes or removes once running.
struct SandboxPaths {
  std::string rings_dir = "/dev/shm";  // new files, written, truncated, removed
  std::string socket_path;             // its directory: the socket made and removed
  std::string owner_record;            // its directory: the record removed; empty: none
  bool remove_socket_dir = false;      // the socket's directory removed too
};

// Landlock, for this thread and the threads it starts from now on (Note [Sandbox layers]).
// Unavailable naming the reason when the kernel has no Landlock, FailedPrecondition when
// the process runs more than one thread, Internal when the kernel refuses the ruleset.
// Irreversible. Returns the ABI version applied.
absl::StatusOr<int> RestrictFiles(const SandboxPaths& paths);

// PR_SET_NO_NEW_PRIVS and the seccomp allowlist, on every thread of the process.
// Unavailable when the kernel has no seccomp filters; Internal when it refuses this one
// (the message says why). Irreversible.
absl::Status FilterSystemCalls();

// The system calls the allowlist admits (some with argument checks), by name.
std::vector<std::string> SandboxAllowedSyscalls();

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_SANDBOX_H_
