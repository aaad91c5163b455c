// Test-only helpers shared by data_service's tests: running a Python snippet under
// $STOKER_PYTHON (falling back to python3), and writing small JPEG files.
#ifndef STOKER_DATA_SERVICE_TEST_UTIL_H_
#define STOKER_DATA_SERVICE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::data_service::test_util {

// 16 random hex digits, for names that must not collide between concurrent test runs
// (the process id does not do: Bazel's sandbox gives every test the same pid).
std::string UniqueId();

// The interpreter tests use: $STOKER_PYTHON if set and non-empty, else "python3".
std::string PythonInterpreter();

// Runs `script` with PythonInterpreter() and returns its standard output and error.
// FailedPrecondition (with the output) if the interpreter fails or exits non-zero.
absl::StatusOr<std::string> RunPython(const std::string& script);

// Writes `rgb` (width x height x 3, tightly packed) as a baseline JPEG at `path`.
absl::Status WriteJpeg(const std::string& path, int width, int height,
                       const std::vector<uint8_t>& rgb, int quality = 95);

// A directory for the test's files: $TEST_TMPDIR (Bazel) or /tmp, plus `name`, created.
std::string TestDirectory(const std::string& name);

}  // namespace stoker::data_service::test_util

#endif  // STOKER_DATA_SERVICE_TEST_UTIL_H_
