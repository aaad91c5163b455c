#include "common/testing/in_child.h"

#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace stoker::testing {

std::string RunInChild(const std::function<std::string()>& check) {
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

}  // namespace stoker::testing
