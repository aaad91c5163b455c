// A test's own temporary directory: made fresh and unique, removed with everything in it when
// its owner goes. Only tests link this.
#ifndef STOKER_COMMON_TESTING_TEMP_DIR_H_
#define STOKER_COMMON_TESTING_TEMP_DIR_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::testing {

// Owns a fresh directory `<parent>/<prefix>.XXXXXX` (mkdtemp, mode 0700) and removes it
// recursively in its destructor. The parent is $TEST_TMPDIR (Bazel's private directory
// for the test), else /tmp; `CreateShort` always uses /tmp, whose short paths leave room
// for a Unix socket's name (sun_path holds 108 bytes; Bazel's TEST_TMPDIR can be longer).
// Move-only; a default-constructed or moved-from owner owns nothing. Not thread-safe.
//
//   ASSERT_OK_AND_ASSIGN(TempDir dir, TempDir::Create("checkpoints"));
//   WriteFile(dir.Join("step_100.ckpt"), bytes);
class TempDir {
 public:
  // InvalidArgument when `prefix` holds a '/'; the mkdtemp error otherwise.
  static absl::StatusOr<TempDir> Create(absl::string_view prefix = "test");
  static absl::StatusOr<TempDir> CreateShort(absl::string_view prefix = "stoker");

  TempDir() = default;
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  // The directory's absolute path; empty when this owns nothing.
  const std::string& path() const { return path_; }
  // path() + "/" + `name`.
  std::string Join(absl::string_view name) const;

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<TempDir> CreateUnder(absl::string_view parent, absl::string_view prefix);
  void Remove();

  std::string path_;
};

// The names of the entries of `dir` that start with `prefix`, in directory order, without
// "." and ".."; empty when `dir` cannot be read.
std::vector<std::string> ListEntries(absl::string_view dir, absl::string_view prefix = "");

}  // namespace stoker::testing

#endif  // STOKER_COMMON_TESTING_TEMP_DIR_H_
