// Test helpers that look at processes and files from the outside: whether a pid still runs,
// the pids that fakes wrote to files, waiting for a file to appear, where runfiles lie. (The
// entries of a directory: ListEntries in common/testing/temp_dir.h.)
#ifndef STOKER_LAUNCHER_TESTING_PROCESS_PROBE_H_
#define STOKER_LAUNCHER_TESTING_PROCESS_PROBE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace stoker::launcher::testing {

// True while `pid` names a process that has not exited (a zombie counts as exited).
bool IsProcessAlive(pid_t pid);

// Waits up to `timeout` for `pid` to exit; true if it did.
bool WaitForProcessExit(pid_t pid, absl::Duration timeout);

// Waits up to `timeout` for `path` to exist and be non-empty; true if it did.
bool WaitForFile(absl::string_view path, absl::Duration timeout);

// Reads `path` whole; empty when it cannot be read.
std::string ReadFileOrEmpty(absl::string_view path);

// Returns the pids written (one number per file) into files `*.pid` under `dir`.
std::vector<pid_t> ReadPidFiles(absl::string_view dir);

// True if anything (a file, directory, socket or dangling link) is at `path`.
bool PathExists(absl::string_view path);

// The absolute path of the runfile at `path`, relative to the workspace root.
std::string Runfile(absl::string_view path);

}  // namespace stoker::launcher::testing

#endif  // STOKER_LAUNCHER_TESTING_PROCESS_PROBE_H_
