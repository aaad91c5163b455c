// A Python process behind two pipes, started with fork and exec.
#include "common/testing/python_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/testing/python_runner.h"

namespace stoker::testing {

PythonWorker::~PythonWorker() {
  if (to_child_ >= 0) close(to_child_);  // end of input: the script returns
  to_child_ = -1;
  if (pid_ > 0) {
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (from_child_ >= 0) close(from_child_);
  if (!script_path_.empty()) unlink(script_path_.c_str());
}

absl::Status PythonWorker::Start() {
  if (script_path_.empty()) {
    std::string path = TempPath("stoker_worker_XXXXXX");
    const int fd = mkstemp(path.data());
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("mkstemp ", path));
    close(fd);
    std::ofstream out(path, std::ios::binary);
    out << script_;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
    script_path_ = path;
  }
  int input[2], output[2];
  if (pipe2(input, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  if (pipe2(output, O_CLOEXEC) != 0) {
    const int error = errno;
    close(input[0]);
    close(input[1]);
    return ErrnoToStatus(error, "pipe2");
  }
  const std::string python = PythonInterpreter();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    for (int fd : {input[0], input[1], output[0], output[1]}) close(fd);
    return ErrnoToStatus(error, "fork");
  }
  if (pid == 0) {
    dup2(input[0], STDIN_FILENO);
    dup2(output[1], STDOUT_FILENO);
    execlp(python.c_str(), python.c_str(), script_path_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(input[0]);
  close(output[1]);
  pid_ = pid;
  to_child_ = input[1];
  from_child_ = output[0];
  pending_.clear();
  return absl::OkStatus();
}

std::string PythonWorker::Stop() {
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  to_child_ = from_child_ = -1;
  if (pid_ <= 0) return "not running";
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("ended by signal ", WTERMSIG(status));
  return "ended";
}

absl::StatusOr<std::string> PythonWorker::Call(absl::string_view request, int timeout_s) {
  if (pid_ <= 0) {
    if (absl::Status started = Start(); !started.ok()) return started;
  }
  const std::string line = absl::StrCat(request, "\n");
  // A process that exited makes the write fail with EPIPE rather than kill the test.
  signal(SIGPIPE, SIG_IGN);
  for (size_t written = 0; written < line.size();) {
    const ssize_t n = write(to_child_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      const std::string how = Stop();
      return ErrnoToStatus(error, absl::StrCat("writing to `", PythonInterpreter(), " ",
                                               script_path_, "` (", how, ")"));
    }
    written += static_cast<size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    if (const size_t end = pending_.find('\n'); end != std::string::npos) {
      std::string reply = pending_.substr(0, end);
      pending_.erase(0, end + 1);
      return reply;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      const std::string how = Stop();
      return absl::DeadlineExceededError(absl::StrCat("`", PythonInterpreter(), " ", script_path_,
                                                      "` gave no reply within ", timeout_s,
                                                      " s (killed: ", how, ")"));
    }
    pollfd readable{from_child_, POLLIN, 0};
    const int ready = poll(&readable, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) return ErrnoToStatus(errno, "poll");
    if (ready <= 0) continue;
    char buffer[1 << 16];
    const ssize_t n = read(from_child_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string how = Stop();
      return absl::InternalError(absl::StrCat("`", PythonInterpreter(), " ", script_path_, "` ",
                                              how, " before replying (its stderr is above)"));
    }
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace stoker::testing
