// Test support: runs a Python program under the interpreter named by $STOKER_PYTHON (falling
// back to `python3`) and returns what it printed, so tests can compare Stoker with PyTorch.
#ifndef STOKER_COMMON_TESTING_PYTHON_RUNNER_H_
#define STOKER_COMMON_TESTING_PYTHON_RUNNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::testing {

// The interpreter tests use: $STOKER_PYTHON if set and not empty, else "python3".
std::string PythonInterpreter();

// `name` under the directory tests and their Python scripts share: $TEST_TMPDIR (else /tmp).
std::string TempPath(absl::string_view name);

// Writes `script` to a file under $TEST_TMPDIR (else /tmp), runs it as
// `<interpreter> <file> <args...>` with a wall-clock limit of `timeout_s` seconds, and
// returns its standard output. Internal (with the program's stderr in the message) when it
// cannot start, exits non-zero or runs out of time. Thread-compatible.
absl::StatusOr<std::string> RunPython(absl::string_view script,
                                      const std::vector<std::string>& args = {},
                                      int timeout_s = 300);

}  // namespace stoker::testing

#endif  // STOKER_COMMON_TESTING_PYTHON_RUNNER_H_
