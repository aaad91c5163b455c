// The data service's sandbox (--sandbox): once the service is initialised it needs no new
// programs, privileges, mounts or network, so a seccomp-BPF filter refuses those system
// calls for the rest of the process's life, should a decoder bug hand an attacker (a
// crafted image) control of a decode thread.
#ifndef STOKER_DATA_SERVICE_SANDBOX_H_
#define STOKER_DATA_SERVICE_SANDBOX_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace stoker::data_service {

// The system calls the filter refuses, by name, for the log line and tests: running
// programs (execve, execveat), tracing or reading other processes (ptrace,
// process_vm_readv/writev), new sockets and connections (socket, socketpair, connect, bind,
// listen), mounts and namespaces (mount, umount2, pivot_root, chroot, unshare, setns),
// identity changes (setuid and friends), kernel modules, kexec, bpf, perf_event_open,
// keyrings, userfaultfd, reboot, swap.
std::vector<std::string> SandboxRefusedSyscalls();

// Sets PR_SET_NO_NEW_PRIVS and installs the filter for every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC): a refused call fails with EPERM; a call from another
// architecture's ABI (x32, i386 on x86-64) is refused too. Accepted sockets, threads, files,
// shared memory and the existing descriptors keep working. Irreversible. Internal when the
// kernel refuses the filter (the message says why).
absl::Status InstallSandbox();

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_SANDBOX_H_
