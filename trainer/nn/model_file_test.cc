// Tests ReadModelFile: a file is read whole; a path that names no file, and a file over
// the cap, are refused with kExitUsage naming the flag and the file; a file whose read
// fails (EIO from /proc/self/mem, as a failing disk gives) ends with kExitCheckpointIo.
#include "trainer/nn/model_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ModelFileTest, ReadsTheWholeFile) {
  std::string bytes(200000, 'x');
  bytes[0] = '\0';
  bytes.back() = 'y';
  absl::StatusOr<std::string> read = ReadModelFile("--model", WriteFile("whole.pt2", bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
}

TEST(ModelFileTest, PathsThatNameNoFileAreUsageErrors) {
  for (const std::string& path : {TempPath("absent.pt2"), std::string(std::getenv("TEST_TMPDIR")),
                                  TempPath("absent/inside.pt2")}) {
    SCOPED_TRACE(path);
    absl::StatusOr<std::string> read = ReadModelFile("--init_weights", path);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ExitCodeOf(read.status()), kExitUsage);
    EXPECT_THAT(std::string(read.status().message()),
                HasSubstr(absl::StrCat("--init_weights=", path, ": ")));
  }
}

TEST(ModelFileTest, FileOverTheCapIsRefusedBeforeItIsRead) {
  const std::string path = WriteFile("big.safetensors", std::string(1001, 'x'));
  absl::StatusOr<std::string> read = ReadModelFile("--init_weights", path, /*max_bytes=*/1000);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExitCodeOf(read.status()), kExitUsage);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("has 1001 bytes, over the limit of 1000 bytes"));
  EXPECT_TRUE(ReadModelFile("--init_weights", path, /*max_bytes=*/1001).ok());
}

TEST(ModelFileTest, FileThatCannotBeReadIsAStorageError) {
  // /proc/self/mem opens, and its read at offset 0 (never mapped) fails with EIO.
  absl::StatusOr<std::string> read = ReadModelFile("--init_weights", "/proc/self/mem");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(ExitCodeOf(read.status()), kExitCheckpointIo) << read.status();
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("--init_weights=/proc/self/mem: reading the file"));
}

}  // namespace
}  // namespace stoker::trainer
