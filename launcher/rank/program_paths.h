// Finding the programs the launcher runs: mpirun on PATH, and trainer and data_service next
// to the launcher's own binary (a bundle keeps them in one folder; bazel-bin keeps each in
// its package folder).
#ifndef STOKER_LAUNCHER_RANK_PROGRAM_PATHS_H_
#define STOKER_LAUNCHER_RANK_PROGRAM_PATHS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::launcher {

// True when `path` is a regular file this process may execute.
bool IsExecutableFile(absl::string_view path);

// Resolves `program` as execvp(3) would: a name with a '/' must itself be an executable
// file; a bare name is looked up in the ':'-separated `search_path` (normally $PATH; when
// empty, nowhere).
// NotFound, naming `flag` (the launcher flag that named the program), otherwise.
absl::StatusOr<std::string> ResolveProgram(absl::string_view program, absl::string_view search_path,
                                           absl::string_view flag);

// The directory of the running binary (from /proc/self/exe, symlinks resolved).
absl::StatusOr<std::string> SelfDirectory();

// Finds program `name` near `directory`: `<directory>/<name>`, then
// `<directory>/../<name>/<name>` (the bazel-bin layout). NotFound listing the places looked
// at and naming `flag`, which sets the path explicitly.
absl::StatusOr<std::string> FindSiblingProgram(absl::string_view directory, absl::string_view name,
                                               absl::string_view flag);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_RANK_PROGRAM_PATHS_H_
