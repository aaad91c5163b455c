#include "common/test_tmpfs.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace stoker {
namespace {

bool WriteProcFile(const char* path, const std::string& text) {
  UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
  return fd.valid() &&
         ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// unshare(flags), then "/" recursively private. The reason on failure.
std::string EnterNamespace(int flags) {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::unshare(flags) != 0) return absl::StrCat("unshare: ", std::strerror(errno));
  if ((flags & CLONE_NEWUSER) != 0) {
    if (!WriteProcFile("/proc/self/setgroups", "deny") ||
        !WriteProcFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")) ||
        !WriteProcFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1"))) {
      return absl::StrCat("writing the id maps: ", std::strerror(errno));
    }
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::StrCat("making / private: ", std::strerror(errno));
  }
  return "";
}

}  // namespace

absl::Status MountPrivateTmpfs(const std::string& directory, size_t bytes) {
  std::string plain = EnterNamespace(CLONE_NEWNS);
  std::string user;
  if (!plain.empty()) {
    user = EnterNamespace(CLONE_NEWUSER | CLONE_NEWNS);
    if (!user.empty()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot make a private mount namespace for a small tmpfs (mount namespace: ", plain,
          "; user and mount namespace: ", user, ")"));
    }
  }
  const std::string options = absl::StrCat("size=", bytes, ",mode=0777");
  if (::mount("stoker-test-tmpfs", directory.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("mount -t tmpfs -o ", options, " on ", directory, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace stoker
