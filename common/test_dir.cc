#include "common/test_dir.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "gtest/gtest.h"

namespace stoker {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir;
}

}  // namespace stoker
