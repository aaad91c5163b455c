#include "data_service/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace stoker::data_service {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "the sandbox knows x86-64 and aarch64"
#endif

// x32 system calls on x86-64 carry this bit; they are another ABI.
constexpr uint32_t kX32Bit = 0x40000000;

// ---- Landlock (linux/landlock.h, spelled out here so that older headers build) ----

constexpr long kLandlockCreateRuleset = 444;  // the same number on x86-64 and aarch64
constexpr long kLandlockAddRule = 445;
constexpr long kLandlockRestrictSelf = 446;
constexpr uint32_t kLandlockCreateRulesetVersion = 1u << 0;
constexpr int kLandlockRulePathBeneath = 1;

constexpr uint64_t kFsExecute = 1ull << 0;
constexpr uint64_t kFsWriteFile = 1ull << 1;
constexpr uint64_t kFsRemoveDir = 1ull << 4;
constexpr uint64_t kFsRemoveFile = 1ull << 5;
constexpr uint64_t kFsMakeChar = 1ull << 6;
constexpr uint64_t kFsMakeDir = 1ull << 7;
constexpr uint64_t kFsMakeReg = 1ull << 8;
constexpr uint64_t kFsMakeSock = 1ull << 9;
constexpr uint64_t kFsMakeFifo = 1ull << 10;
constexpr uint64_t kFsMakeBlock = 1ull << 11;
constexpr uint64_t kFsMakeSym = 1ull << 12;
constexpr uint64_t kFsRefer = 1ull << 13;                 // ABI 2
constexpr uint64_t kFsTruncate = 1ull << 14;              // ABI 3
constexpr uint64_t kFsIoctlDev = 1ull << 15;              // ABI 5
constexpr uint64_t kScopeAbstractUnixSocket = 1ull << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ull << 1;              // ABI 6

struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct __attribute__((packed)) LandlockPathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

// The file-system rights Landlock ABI `abi` knows that change, make, remove or run files
// (reading is not among them).
uint64_t HandledFsAccess(int abi) {
  uint64_t access = kFsExecute | kFsWriteFile | kFsRemoveDir | kFsRemoveFile | kFsMakeChar |
                    kFsMakeDir | kFsMakeReg | kFsMakeSock | kFsMakeFifo | kFsMakeBlock | kFsMakeSym;
  if (abi >= 2) access |= kFsRefer;
  if (abi >= 3) access |= kFsTruncate;
  if (abi >= 5) access |= kFsIoctlDev;
  return access;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

int ThreadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

// ---- seccomp ----

constexpr uint32_t Errno(int error) {
  return SECCOMP_RET_ERRNO | (static_cast<uint32_t>(error) & SECCOMP_RET_DATA);
}
constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kDeny = Errno(EPERM);
constexpr uint32_t kKill = SECCOMP_RET_TRAP;  // the SIGSYS handler reports, then dies

constexpr uint32_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                     CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;

// How a call on the allowlist is checked.
enum class Check {
  kNone,       // allowed whatever its arguments
  kOpenFlags,  // argument `arg`: read-only, or O_CREAT|O_EXCL; never O_TRUNC
  kNoExec,     // argument `arg` (prot) without PROT_EXEC
  kThread,     // argument 0 (clone flags): CLONE_THREAD, no namespace flag
  kOneOf,      // argument `arg` is one of `values` (0 in `values` stands for this pid)
  kEnosys,     // refused with ENOSYS (clone3: glibc then falls back to clone)
};

struct Rule {
  long number;
  const char* name;
  Check check = Check::kNone;
  int arg = 0;
  std::initializer_list<uint32_t> values = {};
};

#define STOKER_ALLOW(name) \
  Rule { SYS_##name, #name }
#define STOKER_CHECK(name, ...) \
  Rule { SYS_##name, #name, __VA_ARGS__ }

// Stands for the process id in kOneOf values (a signal's target).
constexpr uint32_t kSelf = 0xffffffff;

// The allowlist, commonest calls first (the filter tries them in order).
const Rule kRules[] = {
    STOKER_ALLOW(futex),
    STOKER_ALLOW(read),
    STOKER_ALLOW(pread64),
    STOKER_ALLOW(write),
    STOKER_ALLOW(writev),
    STOKER_ALLOW(readv),
    STOKER_ALLOW(preadv),
    STOKER_ALLOW(sendmsg),
    STOKER_ALLOW(recvmsg),
    STOKER_ALLOW(sendto),
    STOKER_ALLOW(recvfrom),
    STOKER_ALLOW(sched_yield),
    STOKER_ALLOW(clock_gettime),
    STOKER_ALLOW(clock_nanosleep),
    STOKER_ALLOW(nanosleep),
    STOKER_ALLOW(gettimeofday),
    STOKER_ALLOW(clock_getres),
    STOKER_ALLOW(ppoll),
    STOKER_ALLOW(epoll_pwait),
    STOKER_ALLOW(epoll_ctl),
    STOKER_ALLOW(epoll_create1),
    STOKER_ALLOW(madvise),
    STOKER_CHECK(mmap, Check::kNoExec, 2),
    STOKER_ALLOW(munmap),
    STOKER_CHECK(mprotect, Check::kNoExec, 2),
    STOKER_CHECK(pkey_mprotect, Check::kNoExec, 2),
    STOKER_ALLOW(mremap),
    STOKER_ALLOW(brk),
    STOKER_ALLOW(mincore),
    STOKER_ALLOW(mlock),
    STOKER_ALLOW(munlock),
    STOKER_ALLOW(membarrier),
    STOKER_CHECK(openat, Check::kOpenFlags, 2),
    STOKER_ALLOW(close),
    STOKER_ALLOW(lseek),
    STOKER_ALLOW(fstat),
    STOKER_ALLOW(newfstatat),
    STOKER_ALLOW(statx),
    STOKER_ALLOW(faccessat),
    STOKER_ALLOW(faccessat2),
    STOKER_ALLOW(readlinkat),
    STOKER_ALLOW(getdents64),
    STOKER_ALLOW(getcwd),
    STOKER_ALLOW(statfs),
    STOKER_ALLOW(fstatfs),
    STOKER_ALLOW(fcntl),
    STOKER_ALLOW(dup),
    STOKER_ALLOW(dup3),
    STOKER_ALLOW(ftruncate),
    STOKER_ALLOW(fallocate),
    STOKER_ALLOW(fsync),
    STOKER_ALLOW(fdatasync),
    STOKER_CHECK(fchmod, Check::kOneOf, 1, {0600}),
    STOKER_ALLOW(unlinkat),
    STOKER_ALLOW(accept4),
    STOKER_ALLOW(accept),
    STOKER_ALLOW(shutdown),
    STOKER_ALLOW(getsockopt),
    STOKER_ALLOW(setsockopt),
    STOKER_ALLOW(getsockname),
    STOKER_ALLOW(getpeername),
    STOKER_ALLOW(eventfd2),
    STOKER_ALLOW(pipe2),
    STOKER_ALLOW(pselect6),
    STOKER_CHECK(clone, Check::kThread),
    STOKER_CHECK(clone3, Check::kEnosys),
    STOKER_ALLOW(set_robust_list),
    STOKER_ALLOW(rseq),
    STOKER_ALLOW(exit),
    STOKER_ALLOW(exit_group),
    STOKER_ALLOW(rt_sigaction),
    STOKER_ALLOW(rt_sigprocmask),
    STOKER_ALLOW(rt_sigreturn),
    STOKER_ALLOW(rt_sigtimedwait),
    STOKER_ALLOW(rt_sigpending),
    STOKER_ALLOW(rt_sigsuspend),
    STOKER_ALLOW(sigaltstack),
    STOKER_ALLOW(restart_syscall),
    STOKER_CHECK(kill, Check::kOneOf, 0, {kSelf}),
    STOKER_CHECK(tgkill, Check::kOneOf, 0, {kSelf}),
    STOKER_ALLOW(getpid),
    STOKER_ALLOW(gettid),
    STOKER_ALLOW(getppid),
    STOKER_ALLOW(getuid),
    STOKER_ALLOW(geteuid),
    STOKER_ALLOW(getgid),
    STOKER_ALLOW(getegid),
    STOKER_ALLOW(getresuid),
    STOKER_ALLOW(getresgid),
    STOKER_ALLOW(getrusage),
    STOKER_ALLOW(getpriority),
    STOKER_ALLOW(sched_getaffinity),
    STOKER_ALLOW(sched_getparam),
    STOKER_ALLOW(sched_getscheduler),
    STOKER_ALLOW(sysinfo),
    STOKER_ALLOW(uname),
    STOKER_ALLOW(times),
    STOKER_ALLOW(getrandom),
    STOKER_CHECK(prlimit64, Check::kOneOf, 0, {0, kSelf}),
    STOKER_ALLOW(getrlimit),
    STOKER_ALLOW(setrlimit),
    STOKER_CHECK(ioctl, Check::kOneOf, 1, {TCGETS, TIOCGWINSZ, FIONREAD}),
    STOKER_CHECK(prctl, Check::kOneOf, 0,
                 {PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_GET_NO_NEW_PRIVS, PR_GET_SECCOMP,
                  0x53564d41 /* PR_SET_VMA */}),
#if defined(__x86_64__)
    // The legacy forms glibc or the sanitizers may still use on x86-64.
    STOKER_CHECK(open, Check::kOpenFlags, 1),
    STOKER_ALLOW(poll),
    STOKER_ALLOW(select),
    STOKER_ALLOW(epoll_wait),
    STOKER_ALLOW(stat),
    STOKER_ALLOW(lstat),
    STOKER_ALLOW(access),
    STOKER_ALLOW(readlink),
    STOKER_ALLOW(dup2),
    STOKER_ALLOW(pipe),
    STOKER_ALLOW(unlink),
    STOKER_ALLOW(rmdir),
    STOKER_ALLOW(time),
#endif
};

#undef STOKER_ALLOW
#undef STOKER_CHECK

sock_filter Statement(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return BPF_JUMP(code, k, jt, jf);
}
sock_filter Return(uint32_t action) { return Statement(BPF_RET | BPF_K, action); }
// The low 32 bits of argument `arg` (both architectures are little-endian; every argument
// checked is an int, or flags that fit in 32 bits).
sock_filter LoadArg(int arg) {
  return Statement(BPF_LD | BPF_W | BPF_ABS,
                   static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * arg));
}

// The instructions that decide `rule` once its number matched; each path ends in a return.
std::vector<sock_filter> RuleBody(const Rule& rule, uint32_t pid) {
  switch (rule.check) {
    case Check::kNone:
      return {Return(kAllow)};
    case Check::kEnosys:
      return {Return(Errno(ENOSYS))};
    case Check::kNoExec:
      return {LoadArg(rule.arg), Jump(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1), Return(kDeny),
              Return(kAllow)};
    case Check::kThread:
      return {LoadArg(0), Jump(BPF_JMP | BPF_JSET | BPF_K, kNamespaceFlags, 1, 0),
              Jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0), Return(kDeny), Return(kAllow)};
    case Check::kOpenFlags:
      // Denied: O_TRUNC; allowed: read-only without O_CREAT, or a new file (O_CREAT|O_EXCL).
      return {LoadArg(rule.arg),
              Jump(BPF_JMP | BPF_JSET | BPF_K, O_TRUNC, 5, 0),
              Statement(BPF_ALU | BPF_AND | BPF_K, O_ACCMODE | O_CREAT),
              Jump(BPF_JMP | BPF_JEQ | BPF_K, O_RDONLY, 4, 0),
              LoadArg(rule.arg),
              Statement(BPF_ALU | BPF_AND | BPF_K, O_CREAT | O_EXCL),
              Jump(BPF_JMP | BPF_JEQ | BPF_K, O_CREAT | O_EXCL, 1, 0),
              Return(kDeny),
              Return(kAllow)};
    case Check::kOneOf: {
      std::vector<sock_filter> body = {LoadArg(rule.arg)};
      const size_t n = rule.values.size();
      size_t k = 0;
      for (uint32_t value : rule.values) {
        ++k;  // this jump's index; deny is at n + 1, allow at n + 2
        body.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, value == kSelf ? pid : value,
                            static_cast<uint8_t>(n + 1 - k), 0));
      }
      body.push_back(Return(kDeny));
      body.push_back(Return(kAllow));
      return body;
    }
  }
  return {Return(kDeny)};
}

std::vector<sock_filter> BuildFilter(uint32_t pid) {
  std::vector<sock_filter> program = {
      Statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      Return(kKill),
      Statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      Jump(BPF_JMP | BPF_JGE | BPF_K, kX32Bit, 0, 1),
      Return(kKill),
  };
  for (const Rule& rule : kRules) {
    const std::vector<sock_filter> body = RuleBody(rule, pid);
    program.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(rule.number), 0,
                           static_cast<uint8_t>(body.size())));
    program.insert(program.end(), body.begin(), body.end());
  }
  program.push_back(Return(kDeny));
  return program;
}

// "data service on <host> killed by its sandbox (syscall ", built before the filter (the
// handler may only write).
char kill_message_prefix[256];

void WriteAll(const char* text, size_t size) {
  while (size > 0) {
    const ssize_t n = write(STDERR_FILENO, text, size);
    if (n <= 0) return;
    text += n;
    size -= static_cast<size_t>(n);
  }
}

// SIGSYS from the filter's kill action: a system call through another ABI, which the
// service never makes. Says so, then dies of SIGSYS (SA_RESETHAND restored the default).
void OnSandboxKill(int signal, siginfo_t* info, void*) {
  WriteAll(kill_message_prefix, std::strlen(kill_message_prefix));
  char digits[24];
  int length = 0;
  unsigned value = static_cast<unsigned>(info->si_syscall);
  do {
    digits[length++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  char number[24];
  for (int i = 0; i < length; ++i) number[i] = digits[length - 1 - i];
  WriteAll(number, static_cast<size_t>(length));
  static constexpr char kSuffix[] = ", a call through another architecture's ABI)\n";
  WriteAll(kSuffix, sizeof(kSuffix) - 1);
  raise(signal);
}

}  // namespace

SandboxSupport ProbeSandboxSupport() {
  SandboxSupport support;
  if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
    support.seccomp_missing =
        absl::StrCat("prctl(PR_GET_SECCOMP): ", std::strerror(errno), " (no CONFIG_SECCOMP)");
  } else {
    uint32_t action = SECCOMP_RET_ERRNO;
    if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
      support.seccomp_missing =
          absl::StrCat("seccomp(SECCOMP_GET_ACTION_AVAIL): ", std::strerror(errno),
                       " (no CONFIG_SECCOMP_FILTER)");
    } else {
      support.seccomp = true;
    }
  }
  const long abi = syscall(kLandlockCreateRuleset, nullptr, 0, kLandlockCreateRulesetVersion);
  if (abi > 0) {
    support.landlock_abi = static_cast<int>(abi);
  } else if (errno == EOPNOTSUPP) {
    support.landlock_missing = "built into the kernel but not enabled (add landlock to lsm=)";
  } else if (errno == ENOSYS) {
    support.landlock_missing = "not in this kernel (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK)";
  } else {
    support.landlock_missing = absl::StrCat("landlock_create_ruleset: ", std::strerror(errno));
  }
  return support;
}

std::string DescribeSandboxSupport(const SandboxSupport& support) {
  const std::string seccomp =
      support.seccomp ? std::string("seccomp filters")
                      : absl::StrCat("no seccomp filters (", support.seccomp_missing, ")");
  const std::string landlock = support.landlock_abi > 0
                                   ? absl::StrCat("Landlock ABI ", support.landlock_abi)
                                   : absl::StrCat("no Landlock (", support.landlock_missing, ")");
  return absl::StrCat(seccomp, support.landlock_abi > 0 ? " and " : "; ", landlock);
}

absl::StatusOr<int> RestrictFiles(const SandboxPaths& paths) {
  const SandboxSupport support = ProbeSandboxSupport();
  if (support.landlock_abi == 0) return absl::UnavailableError(support.landlock_missing);
  if (const int threads = ThreadCount(); threads != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the process runs ", threads, " threads; Landlock would confine only this one"));
  }
  const int abi = support.landlock_abi;
  LandlockRulesetAttr attr{};
  attr.handled_access_fs = HandledFsAccess(abi);
  if (abi >= 6) attr.scoped = kScopeSignal | kScopeAbstractUnixSocket;
  const size_t attr_size = abi >= 6 ? sizeof(attr) : offsetof(LandlockRulesetAttr, scoped);
  UniqueFd ruleset(static_cast<int>(syscall(kLandlockCreateRuleset, &attr, attr_size, 0)));
  if (!ruleset.valid()) {
    return absl::InternalError(absl::StrCat("landlock_create_ruleset: ", std::strerror(errno)));
  }
  std::vector<std::pair<std::string, uint64_t>> rules = {
      {paths.rings_dir, kFsMakeReg | kFsWriteFile | kFsRemoveFile | (abi >= 3 ? kFsTruncate : 0)},
  };
  if (!paths.socket_path.empty()) {
    rules.push_back({DirectoryOf(paths.socket_path), kFsMakeSock | kFsRemoveFile});
    if (paths.remove_socket_dir) {
      rules.push_back({DirectoryOf(DirectoryOf(paths.socket_path)), kFsRemoveDir});
    }
  }
  if (!paths.owner_record.empty()) {
    rules.push_back({DirectoryOf(paths.owner_record), kFsRemoveFile});
  }
  for (const auto& [path, access] : rules) {
    UniqueFd dir(open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) {
      return absl::InternalError(
          absl::StrCat("Landlock: cannot open ", path, ": ", std::strerror(errno)));
    }
    LandlockPathBeneathAttr beneath{access, dir.get()};
    if (syscall(kLandlockAddRule, ruleset.get(), kLandlockRulePathBeneath, &beneath, 0) != 0) {
      return absl::InternalError(
          absl::StrCat("landlock_add_rule(", path, "): ", std::strerror(errno)));
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrCat("prctl(PR_SET_NO_NEW_PRIVS): ", std::strerror(errno)));
  }
  if (syscall(kLandlockRestrictSelf, ruleset.get(), 0) != 0) {
    return absl::InternalError(absl::StrCat("landlock_restrict_self: ", std::strerror(errno)));
  }
  return abi;
}

absl::Status FilterSystemCalls() {
  const SandboxSupport support = ProbeSandboxSupport();
  if (!support.seccomp) return absl::UnavailableError(support.seccomp_missing);

  char host[128] = "?";
  gethostname(host, sizeof(host) - 1);
  const std::string prefix =
      absl::StrCat("data service on ", host, " killed by its sandbox (syscall ");
  std::strncpy(kill_message_prefix, prefix.c_str(), sizeof(kill_message_prefix) - 1);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnSandboxKill;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSYS, &action, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("sigaction(SIGSYS): ", std::strerror(errno)));
  }

  std::vector<sock_filter> program = BuildFilter(static_cast<uint32_t>(getpid()));
  sock_fprog filter;
  filter.len = static_cast<unsigned short>(program.size());
  filter.filter = program.data();

#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer checks by tracing the process, which the filter refuses: it checks now,
  // once, and not at exit.
  __lsan_do_leak_check();
#endif
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrCat("prctl(PR_SET_NO_NEW_PRIVS): ", std::strerror(errno)));
  }
  // Every thread at once: the decode pool and the connection threads exist already.
  const long installed =
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &filter);
  if (installed < 0) {
    return absl::InternalError(
        absl::StrCat("seccomp(SECCOMP_SET_MODE_FILTER): ", std::strerror(errno)));
  }
  if (installed > 0) {  // TSYNC names the thread that could not take the filter
    return absl::InternalError(
        absl::StrCat("thread ", installed, " could not take the seccomp filter"));
  }
  return absl::OkStatus();
}

std::vector<std::string> SandboxAllowedSyscalls() {
  std::vector<std::string> names;
  for (const Rule& rule : kRules) {
    if (rule.check != Check::kEnosys) names.emplace_back(rule.name);
  }
  return names;
}

}  // namespace stoker::data_service
