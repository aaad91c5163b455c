#include "data_service/sandbox.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "absl/strings/str_cat.h"

namespace stoker::data_service {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "the sandbox knows x86-64 and aarch64"
#endif

// x32 system calls on x86-64 carry this bit; they are refused as another ABI.
constexpr uint32_t kX32Bit = 0x40000000;

struct Refused {
  long number;
  const char* name;
};

#define STOKER_SYSCALL(name) \
  Refused { SYS_##name, #name }

const Refused kRefused[] = {
    STOKER_SYSCALL(execve),
    STOKER_SYSCALL(execveat),
    STOKER_SYSCALL(ptrace),
    STOKER_SYSCALL(process_vm_readv),
    STOKER_SYSCALL(process_vm_writev),
    STOKER_SYSCALL(socket),
    STOKER_SYSCALL(socketpair),
    STOKER_SYSCALL(connect),
    STOKER_SYSCALL(bind),
    STOKER_SYSCALL(listen),
    STOKER_SYSCALL(mount),
    STOKER_SYSCALL(umount2),
    STOKER_SYSCALL(pivot_root),
    STOKER_SYSCALL(chroot),
    STOKER_SYSCALL(unshare),
    STOKER_SYSCALL(setns),
    STOKER_SYSCALL(setuid),
    STOKER_SYSCALL(setgid),
    STOKER_SYSCALL(setreuid),
    STOKER_SYSCALL(setregid),
    STOKER_SYSCALL(setresuid),
    STOKER_SYSCALL(setresgid),
    STOKER_SYSCALL(setgroups),
    STOKER_SYSCALL(init_module),
    STOKER_SYSCALL(finit_module),
    STOKER_SYSCALL(delete_module),
    STOKER_SYSCALL(kexec_load),
    STOKER_SYSCALL(bpf),
    STOKER_SYSCALL(perf_event_open),
    STOKER_SYSCALL(add_key),
    STOKER_SYSCALL(request_key),
    STOKER_SYSCALL(keyctl),
    STOKER_SYSCALL(userfaultfd),
    STOKER_SYSCALL(reboot),
    STOKER_SYSCALL(swapon),
    STOKER_SYSCALL(swapoff),
};

#undef STOKER_SYSCALL

}  // namespace

std::vector<std::string> SandboxRefusedSyscalls() {
  std::vector<std::string> names;
  for (const Refused& refused : kRefused) names.emplace_back(refused.name);
  return names;
}

absl::Status InstallSandbox() {
  // The program: check the architecture (else kill), refuse another ABI, then one
  // comparison per refused call (EPERM); everything else is allowed.
  std::vector<sock_filter> program = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kX32Bit, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
  };
  for (const Refused& refused : kRefused) {
    program.push_back(
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(refused.number), 0, 1));
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)));
  }
  program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog filter;
  filter.len = static_cast<unsigned short>(program.size());
  filter.filter = program.data();

#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer checks by tracing the process, which the filter refuses: it checks now,
  // once, and not at exit.
  __lsan_do_leak_check();
#endif
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::InternalError(
        absl::StrCat("--sandbox: prctl(PR_SET_NO_NEW_PRIVS): ", std::strerror(errno)));
  }
  // Every thread at once: the decode pool and the connection threads exist already.
  const long installed =
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &filter);
  if (installed < 0) {
    return absl::InternalError(
        absl::StrCat("--sandbox: seccomp(SECCOMP_SET_MODE_FILTER): ", std::strerror(errno),
                     " (a kernel without seccomp filters?)"));
  }
  if (installed > 0) {  // TSYNC names the thread that could not take the filter
    return absl::InternalError(
        absl::StrCat("--sandbox: thread ", installed, " could not take the seccomp filter"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::data_service
