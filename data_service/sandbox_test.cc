// Tests of the data service's sandbox: once installed (in a forked child), execve and a new
// socket are refused with EPERM, in threads started before it too, while files, threads
// and memory keep working.
#include "data_service/sandbox.h"

#include <fcntl.h>
#include <sys/socket.h>
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
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

// Runs `check` in a child process; returns what it reports ("" when all is well).
std::string InChild(const std::function<std::string()>& check) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string error = check();
    (void)!write(fds[1], error.data(), error.size());
    _exit(0);
  }
  close(fds[1]);
  std::string error;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) error.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    absl::StrAppend(&error, " (child ended with status ", status, ")");
  }
  return error;
}

TEST(SandboxTest, RefusesExecveAndNewSocketsAndKeepsFilesAndThreads) {
  EXPECT_EQ(InChild([] {
              // A thread that exists before the filter, as the decode pool does.
              absl::Notification installed, checked;
              std::atomic<int> thread_errno{0};
              std::thread before([&] {
                installed.WaitForNotification();
                char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
                execv("/bin/true", argv);
                thread_errno = errno;
                checked.Notify();
              });
              if (absl::Status s = InstallSandbox(); !s.ok()) return std::string(s.message());
              installed.Notify();
              checked.WaitForNotification();
              before.join();
              if (thread_errno != EPERM) {
                return absl::StrCat("execve in an older thread: ", std::strerror(thread_errno));
              }
              char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
              if (execv("/bin/true", argv) == 0 || errno != EPERM) {
                return absl::StrCat("execve: ", std::strerror(errno));
              }
              if (socket(AF_INET, SOCK_STREAM, 0) >= 0 || errno != EPERM) {
                return absl::StrCat("socket: ", std::strerror(errno));
              }
              // What the service does keeps working.
              const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
              char text[64];
              if (fd < 0 || read(fd, text, sizeof(text)) <= 0) return std::string("open/read");
              close(fd);
              std::vector<char> memory(64 << 20, 1);
              std::atomic<bool> ran{false};
              std::thread after([&] { ran = true; });
              after.join();
              if (!ran) return std::string("a new thread did not run");
              return std::string();
            }),
            "");
}

TEST(SandboxTest, TheListNamesTheRefusedCalls) {
  const std::vector<std::string> names = SandboxRefusedSyscalls();
  for (const char* name :
       {"execve", "execveat", "ptrace", "socket", "connect", "mount", "setuid"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

}  // namespace
}  // namespace stoker::data_service
