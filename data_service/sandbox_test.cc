// Tests of the data service's sandbox: once installed (in a forked child), execve and a new
// socket are refused with EPERM, in threads started before it too, while files, threads
// and memory keep working.
#include "data_service/sandbox.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/in_child.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using testing::RunInChild;

TEST(SandboxTest, RefusesExecveAndNewSocketsAndKeepsFilesAndThreads) {
  EXPECT_EQ(RunInChild([] {
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
