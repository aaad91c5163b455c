#include "common/testing/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace stoker::testing {

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
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  path_.clear();
}

}  // namespace stoker::testing
