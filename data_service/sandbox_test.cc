// Tests of the data service's sandbox, each in a forked child that applies it as the
// service does (Landlock while single-threaded, then the seccomp allowlist on every
// thread): what a hijacked decode thread would try fails with a named error (opening a
// file for writing, execve, fork, namespaces, io_uring, ptrace, process_vm_writev,
// signalling another process, executable memory), while what the service does keeps
// working (reading the dataset, rings in /dev/shm, threads, memory).
#include "data_service/sandbox.h"

#include <fcntl.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/in_child.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using testing::RunInChild;
using testing::TempDir;

// "" when `result` is -1 with errno `expected`; else what happened, for `what`.
std::string Refused(const char* what, long result, int expected) {
  if (result == -1 && errno == expected) return "";
  return absl::StrCat(what, ": returned ", result, " (", std::strerror(errno), "), expected ",
                      std::strerror(expected), "\n");
}

std::string Worked(const char* what, long result) {
  if (result != -1) return "";
  return absl::StrCat(what, ": ", std::strerror(errno), "\n");
}

// A dataset directory with one file, and a socket directory, as the service has them.
struct Fixture {
  TempDir dir;
  std::string dataset;  // a directory with image.jpg
  std::string image;
  std::string socket_path;
};

Fixture MakeFixture() {
  absl::StatusOr<TempDir> dir = TempDir::CreateShort("stoker-sbx");
  EXPECT_TRUE(dir.ok()) << dir.status();
  Fixture f{std::move(*dir)};
  f.dataset = f.dir.path() + "/dataset";
  EXPECT_EQ(mkdir(f.dataset.c_str(), 0700), 0);
  EXPECT_EQ(mkdir((f.dir.path() + "/job").c_str(), 0700), 0);
  f.socket_path = f.dir.path() + "/job/node0.sock";
  f.image = f.dataset + "/image.jpg";
  const int fd = open(f.image.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, "JPEG", 4), 4);
  close(fd);
  return f;
}

// What a child returns when Landlock cannot confine it: a sanitizer's runtime thread (TSan's)
// runs beside the test's.
constexpr char kOtherThreads[] = "SKIP: other threads run";

// Applies both layers as the service does; "" or why not. Landlock is left out (and its
// checks with it) where the kernel has none or other threads run.
std::string ApplySandbox(const Fixture& f, bool* landlock) {
  SandboxPaths paths;
  paths.socket_path = f.socket_path;
  *landlock = ProbeSandboxSupport().landlock_abi > 0;
  if (*landlock) {
    absl::StatusOr<int> abi = RestrictFiles(paths);
    if (absl::IsFailedPrecondition(abi.status())) {
      *landlock = false;
    } else if (!abi.ok()) {
      return absl::StrCat("RestrictFiles: ", abi.status().message());
    }
  }
  if (absl::Status s = FilterSystemCalls(); !s.ok()) {
    return absl::StrCat("FilterSystemCalls: ", s.message());
  }
  return "";
}

TEST(SandboxTest, TheKernelHereOffersSeccomp) {
  const SandboxSupport support = ProbeSandboxSupport();
  EXPECT_TRUE(support.seccomp) << support.seccomp_missing;
  EXPECT_NE(DescribeSandboxSupport(support).find("seccomp filters"), std::string::npos);
}

TEST(SandboxTest, NoFileIsOpenedForWritingButNewOnesUnderTheRingsDirectory) {
  Fixture f = MakeFixture();
  EXPECT_EQ(
      RunInChild([&] {
        bool landlock = false;
        if (std::string error = ApplySandbox(f, &landlock); !error.empty()) return error;
        std::string errors;
        const char* image = f.image.c_str();
        // An existing file, in any mode that writes: refused by the allowlist.
        errors += Refused("open O_WRONLY", open(image, O_WRONLY | O_CLOEXEC), EPERM);
        errors += Refused("open O_RDWR", open(image, O_RDWR | O_CLOEXEC), EPERM);
        errors +=
            Refused("open O_RDONLY|O_TRUNC", open(image, O_RDONLY | O_TRUNC | O_CLOEXEC), EPERM);
        errors += Refused("openat O_WRONLY|O_CREAT",
                          openat(AT_FDCWD, image, O_WRONLY | O_CREAT | O_CLOEXEC, 0600), EPERM);
#if defined(SYS_creat)
        errors += Refused("creat", syscall(SYS_creat, image, 0600), EPERM);
#endif
        errors += Refused("truncate", truncate(image, 0), EPERM);
        errors += Refused("chmod", chmod(image, 0666), EPERM);
        errors += Refused("rename", rename(image, (f.dataset + "/moved").c_str()), EPERM);
        errors += Refused("link", link(image, (f.dataset + "/linked").c_str()), EPERM);
        errors += Refused("symlink", symlink(image, (f.dataset + "/sym").c_str()), EPERM);
        errors += Refused("mkdir", mkdir((f.dataset + "/d").c_str(), 0700), EPERM);
        // A new file outside the rings' directory: refused by Landlock.
        const std::string outside = f.dataset + "/new";
        if (landlock) {
          errors +=
              Refused("a new file in the dataset",
                      open(outside.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600), EACCES);
          errors += Refused("unlink in the dataset", unlink(image), EACCES);
        }
        // Reading the dataset works.
        const int fd = open(image, O_RDONLY | O_CLOEXEC);
        char bytes[8] = {};
        if (fd < 0 || read(fd, bytes, sizeof(bytes)) != 4 || std::memcmp(bytes, "JPEG", 4)) {
          errors += absl::StrCat("reading the dataset: ", std::strerror(errno), "\n");
        }
        errors += Refused("fchmod 0644", fchmod(fd, 0644), EPERM);
        close(fd);
        // A ring, as common/shm_segment.cc makes one.
        const std::string ring = absl::StrCat("/dev/shm/stoker.sbxtest", getpid());
        const int shm =
            open(ring.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        errors += Worked("a ring: open", shm);
        errors += Worked("a ring: fchmod 0600", fchmod(shm, 0600));
        errors += Worked("a ring: ftruncate", ftruncate(shm, 1 << 16));
        errors += Worked("a ring: fallocate", fallocate(shm, 0, 0, 1 << 16));
        void* mapped = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
        if (mapped == MAP_FAILED) {
          errors += absl::StrCat("a ring: mmap: ", std::strerror(errno), "\n");
        } else {
          static_cast<char*>(mapped)[100] = 1;
          munmap(mapped, 1 << 16);
        }
        close(shm);
        errors += Worked("a ring: unlink", unlink(ring.c_str()));
        return errors;
      }),
      "");
}

TEST(SandboxTest, NoProgramsProcessesNamespacesIoUringOrTracing) {
  Fixture f = MakeFixture();
  EXPECT_EQ(
      RunInChild([&] {
        // A thread that exists before the filter, as the decode pool does.
        absl::Notification applied, checked;
        std::string thread_errors;
        std::thread before([&] {
          applied.WaitForNotification();
          char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
          thread_errors += Refused("execve in an older thread", execv("/bin/true", argv), EPERM);
          thread_errors += Refused("open O_WRONLY in an older thread",
                                   open(f.image.c_str(), O_WRONLY | O_CLOEXEC), EPERM);
          checked.Notify();
        });
        // Landlock confines only a single-threaded process's threads: seccomp alone here.
        if (absl::Status s = FilterSystemCalls(); !s.ok()) {
          applied.Notify();
          before.join();
          return std::string(s.message());
        }
        applied.Notify();
        checked.WaitForNotification();
        before.join();
        std::string errors = thread_errors;
        char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
        errors += Refused("execve", execv("/bin/true", argv), EPERM);
        errors += Refused("execveat",
                          syscall(SYS_execveat, AT_FDCWD, "/bin/true", argv, nullptr, 0), EPERM);
        errors += Refused("fork", fork(), EPERM);
        errors += Refused("vfork-like clone", syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0), EPERM);
        errors += Refused("clone(CLONE_NEWUSER)",
                          syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), EPERM);
        errors += Refused("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER), EPERM);
        errors += Refused("setns", syscall(SYS_setns, 0, 0), EPERM);
        io_uring_params params{};
        errors += Refused("io_uring_setup", syscall(SYS_io_uring_setup, 8, &params), EPERM);
        errors +=
            Refused("io_uring_enter", syscall(SYS_io_uring_enter, 0, 1, 0, 0, nullptr, 0), EPERM);
        errors +=
            Refused("io_uring_register", syscall(SYS_io_uring_register, 0, 0, nullptr, 0), EPERM);
        const pid_t parent = getppid();
        errors += Refused("ptrace(PTRACE_ATTACH, parent)",
                          ptrace(PTRACE_ATTACH, parent, nullptr, nullptr), EPERM);
        errors +=
            Refused("ptrace(PTRACE_TRACEME)", ptrace(PTRACE_TRACEME, 0, nullptr, nullptr), EPERM);
        char byte = 0;
        iovec local{&byte, 1};
        iovec remote{&byte, 1};
        errors += Refused("process_vm_writev(parent)",
                          process_vm_writev(parent, &local, 1, &remote, 1, 0), EPERM);
        errors += Refused("process_vm_readv(parent)",
                          process_vm_readv(parent, &local, 1, &remote, 1, 0), EPERM);
        errors += Refused("kill(parent)", kill(parent, 0), EPERM);
        errors += Refused("kill(process group)", kill(0, 0), EPERM);
        errors += Refused("tgkill(parent)", syscall(SYS_tgkill, parent, parent, 0), EPERM);
        errors += Worked("kill(self, 0)", kill(getpid(), 0));
        errors += Refused("socket", socket(AF_UNIX, SOCK_STREAM, 0), EPERM);
        errors += Refused("memfd_create", syscall(SYS_memfd_create, "x", 0), EPERM);
        errors += Refused("ioctl(TIOCSTI)", ioctl(STDIN_FILENO, TIOCSTI, "x"), EPERM);
        errors += Refused("bpf", syscall(SYS_bpf, 0, nullptr, 0), EPERM);
        errors += Refused("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, nullptr), EPERM);
        // No executable memory, new or changed.
        void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (code != MAP_FAILED || errno != EPERM) {
          errors += absl::StrCat("mmap PROT_EXEC: ", std::strerror(errno), "\n");
        }
        void* page =
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        errors += Worked("mmap PROT_READ|PROT_WRITE", page == MAP_FAILED ? -1 : 0);
        errors += Refused("mprotect PROT_EXEC", mprotect(page, 4096, PROT_READ | PROT_EXEC), EPERM);
        errors += Worked("mprotect PROT_READ", mprotect(page, 4096, PROT_READ));
        // What the service does keeps working: threads, memory, time.
        std::vector<char> memory(64 << 20, 1);
        std::atomic<bool> ran{false};
        std::thread after([&] { ran = true; });
        after.join();
        if (!ran) errors += "a new thread did not run\n";
        timespec now;
        errors += Worked("clock_gettime", clock_gettime(CLOCK_MONOTONIC, &now));
        return errors;
      }),
      "");
}

TEST(SandboxTest, LandlockConfinesFilesEvenWithoutTheFilter) {
  if (ProbeSandboxSupport().landlock_abi == 0) {
    GTEST_SKIP() << DescribeSandboxSupport(ProbeSandboxSupport());
  }
  Fixture f = MakeFixture();
  const std::string result = RunInChild([&] {
    SandboxPaths paths;
    paths.socket_path = f.socket_path;
    absl::StatusOr<int> abi = RestrictFiles(paths);
    if (absl::IsFailedPrecondition(abi.status())) return std::string(kOtherThreads);
    if (!abi.ok()) return std::string(abi.status().message());
    std::string errors;
    errors += Refused("open O_WRONLY", open(f.image.c_str(), O_WRONLY | O_CLOEXEC), EACCES);
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    errors += Refused("execve", execv("/bin/true", argv), EACCES);
    // The service's socket, in its directory only.
    auto bind_at = [](const std::string& path) -> long {
      const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
      const long bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
      const int error = errno;
      close(fd);
      errno = error;
      return bound;
    };
    errors += Worked("bind the socket", bind_at(f.socket_path));
    errors += Worked("unlink the socket", unlink(f.socket_path.c_str()));
    errors += Refused("bind elsewhere", bind_at(f.dataset + "/other.sock"), EACCES);
    return errors;
  });
  if (result == kOtherThreads) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
}

#if defined(__x86_64__)
TEST(SandboxTest, AnotherArchitecturesCallKillsTheProcessNamingIt) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    if (!FilterSystemCalls().ok()) _exit(3);
    long result;
    // getpid (20) through the i386 ABI.
    asm volatile("int $0x80" : "=a"(result) : "a"(20) : "memory");
    _exit(4);
  }
  close(fds[1]);
  std::string log;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) log.append(buffer, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << status << " " << log;
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
  EXPECT_NE(log.find("killed by its sandbox (syscall 20,"), std::string::npos) << log;
  EXPECT_NE(log.find("data service on "), std::string::npos) << log;
}
#endif

TEST(SandboxTest, TheAllowlistHasNoDangerousCall) {
  const std::vector<std::string> names = SandboxAllowedSyscalls();
  for (const char* name : {"futex", "read", "openat", "mmap", "clone", "accept4", "recvmsg"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  for (const char* name : {"execve",
                           "execveat",
                           "fork",
                           "vfork",
                           "clone3",
                           "ptrace",
                           "process_vm_readv",
                           "process_vm_writev",
                           "io_uring_setup",
                           "io_uring_enter",
                           "io_uring_register",
                           "socket",
                           "connect",
                           "bind",
                           "unshare",
                           "setns",
                           "mount",
                           "memfd_create",
                           "rename",
                           "renameat2",
                           "link",
                           "chmod",
                           "bpf",
                           "pidfd_open",
                           "pidfd_send_signal",
                           "userfaultfd"}) {
    EXPECT_EQ(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

}  // namespace
}  // namespace stoker::data_service
