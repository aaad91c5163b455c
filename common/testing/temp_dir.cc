#include "common/testing/temp_dir.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace stoker::testing {
namespace {

// nftw's callback: removes each entry, the directories after their contents.
int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  ::remove(path);
  return 0;
}

}  // namespace

absl::StatusOr<TempDir> TempDir::Create(absl::string_view prefix) {
  const char* test_tmpdir = std::getenv("TEST_TMPDIR");
  return CreateUnder(test_tmpdir != nullptr && test_tmpdir[0] != '\0' ? test_tmpdir : "/tmp",
                     prefix);
}

absl::StatusOr<TempDir> TempDir::CreateShort(absl::string_view prefix) {
  return CreateUnder("/tmp", prefix);
}

absl::StatusOr<TempDir> TempDir::CreateUnder(absl::string_view parent, absl::string_view prefix) {
  if (absl::StrContains(prefix, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("a temporary directory's prefix has no '/': '", prefix, "'"));
  }
  std::string path = absl::StrCat(parent, "/", prefix, ".XXXXXX");
  if (::mkdtemp(path.data()) == nullptr) return ErrnoToStatus(errno, "mkdtemp " + path);
  return TempDir(std::move(path));
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, std::string())) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

TempDir::~TempDir() { Remove(); }

std::string TempDir::Join(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

void TempDir::Remove() {
  if (path_.empty()) return;
  // nftw rather than std::filesystem::remove_all: libtorch exports a remove_all of its own
  // that a test linking it would call instead, and that one crashes.
  ::nftw(path_.c_str(), RemoveEntry, /*nopenfd=*/16, FTW_DEPTH | FTW_PHYS);
  path_.clear();
}

std::vector<std::string> ListEntries(absl::string_view dir, absl::string_view prefix) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(std::string(dir).c_str());
  if (handle == nullptr) return names;
  while (dirent* entry = ::readdir(handle)) {
    const absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (absl::StartsWith(name, prefix)) names.emplace_back(name);
  }
  ::closedir(handle);
  return names;
}

}  // namespace stoker::testing
