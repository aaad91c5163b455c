// Test support: one long-lived Python process that answers requests, so that a test with many
// cases pays the interpreter's start and imports (torch: seconds) once instead of per case.
#ifndef STOKER_COMMON_TESTING_PYTHON_WORKER_H_
#define STOKER_COMMON_TESTING_PYTHON_WORKER_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::testing {

// Runs `script` under PythonInterpreter() (python_runner.h) with pipes on its standard input
// and output: Call writes one request line and returns the one line the script writes back.
// The script reads requests line by line until end of input; what it writes to stderr goes
// to the test's log. The process starts at the first Call and again at the first Call after
// it exited or ran out of time; the destructor closes its input and waits for it.
// Thread-compatible.
//
//   PythonWorker worker(kScript);
//   ASSIGN_OR_RETURN(std::string reply, worker.Call(R"({"op": "list"})", /*timeout_s=*/60));
class PythonWorker {
 public:
  explicit PythonWorker(std::string script) : script_(std::move(script)) {}
  ~PythonWorker();
  PythonWorker(const PythonWorker&) = delete;
  PythonWorker& operator=(const PythonWorker&) = delete;

  // Sends `request` (one line, no newline) and returns the reply line without its newline.
  // Internal when the process cannot start or exits before replying; DeadlineExceeded (and
  // the process killed) when no reply comes within `timeout_s` seconds.
  absl::StatusOr<std::string> Call(absl::string_view request, int timeout_s);

 private:
  absl::Status Start();
  // Kills the process if still running and reaps it; returns how it ended, in words.
  std::string Stop();

  const std::string script_;
  std::string script_path_;
  pid_t pid_ = -1;
  int to_child_ = -1;    // the script's standard input
  int from_child_ = -1;  // the script's standard output
  std::string pending_;  // what was read past the last reply line
};

}  // namespace stoker::testing

#endif  // STOKER_COMMON_TESTING_PYTHON_WORKER_H_
