#include "launcher/rank/program_paths.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"

namespace stoker::launcher {

bool IsExecutableFile(absl::string_view path) {
  const std::string file(path);
  struct stat info;
  return stat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(file.c_str(), X_OK) == 0;
}

absl::StatusOr<std::string> ResolveProgram(absl::string_view program, absl::string_view search_path,
                                           absl::string_view flag) {
  if (program.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " must not be empty"));
  if (program.find('/') != absl::string_view::npos) {
    if (IsExecutableFile(program)) return std::string(program);
    return absl::NotFoundError(absl::StrCat(flag, "=", program, ": not an executable file"));
  }
  if (search_path.empty()) {
    return absl::NotFoundError(
        absl::StrCat(flag, "=", program, ": PATH is empty; give the program's path"));
  }
  for (absl::string_view dir : absl::StrSplit(search_path, ':')) {
    // An empty PATH entry means the current directory, as for execvp.
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat(flag, "=", program, ": not found on PATH (", search_path, ")"));
}

absl::StatusOr<std::string> SelfDirectory() {
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length < 0) return ErrnoToStatus(errno, "readlink /proc/self/exe");
  absl::string_view self(path, static_cast<size_t>(length));
  const size_t slash = self.rfind('/');
  if (slash == absl::string_view::npos) {
    return absl::InternalError(absl::StrCat("/proc/self/exe is not a path: ", self));
  }
  return std::string(slash == 0 ? "/" : self.substr(0, slash));
}

absl::StatusOr<std::string> FindSiblingProgram(absl::string_view directory, absl::string_view name,
                                               absl::string_view flag) {
  const std::string candidates[] = {
      absl::StrCat(directory, "/", name),
      absl::StrCat(directory, "/../", name, "/", name),
  };
  for (const std::string& candidate : candidates) {
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("no ", name, " program next to the launcher (looked at ",
                                          candidates[0], " and ", candidates[1], "): pass ", flag,
                                          "=PATH"));
}

}  // namespace stoker::launcher
