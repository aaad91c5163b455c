// Test helpers: Python tool runner with a timeout, file reading, image comparison.
#include "data_service/image/test_support.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/testing/python_runner.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker::data_service::image::testing {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? std::string(value) : fallback;
}

}  // namespace

absl::Status RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                           absl::Duration timeout) {
  const std::string python = stoker::testing::PythonInterpreter();
  const std::string runfiles =
      absl::StrCat(EnvOr("TEST_SRCDIR", "."), "/", EnvOr("TEST_WORKSPACE", "stoker"));
  const std::string path = absl::StrCat(runfiles, "/data_service/image/testdata_tools/", script);
  std::vector<std::string> argv_storage = {python, path};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(absl::StrCat(
          absl::StrJoin(argv_storage, " "), " ran longer than ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        absl::StrJoin(argv_storage, " "), " failed (",
        WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        "); its output is in the test log. It needs numpy, Pillow and torchvision; set "
        "STOKER_PYTHON to an interpreter that has them"));
  }
  return absl::OkStatus();
}

const std::string& ImageCaseDir(const std::string& command, const std::vector<std::string>& extra) {
  // The directories live as long as the test binary.
  static auto* dirs = new std::map<std::string, ::stoker::testing::TempDir>();
  auto it = dirs->find(command);
  if (it == dirs->end()) {
    absl::StatusOr<::stoker::testing::TempDir> dir = ::stoker::testing::TempDir::Create(command);
    EXPECT_OK(dir);
    if (dir.ok()) {
      std::vector<std::string> args = {command, dir->path()};
      args.insert(args.end(), extra.begin(), extra.end());
      EXPECT_OK(RunPythonTool("make_image_cases.py", args));
    }
    it = dirs->emplace(command, dir.ok() ? std::move(*dir) : ::stoker::testing::TempDir()).first;
  }
  return it->second.path();
}

absl::StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> LoadFileOrFail(const std::string& path) {
  auto bytes = ReadFileBytes(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

absl::StatusOr<std::vector<std::vector<std::string>>> ReadTable(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<std::vector<std::string>> table;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (!fields.empty()) table.push_back(std::move(fields));
  }
  return table;
}

double Psnr(const uint8_t* a, const uint8_t* b, size_t n) {
  double sse = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sse += d * d;
  }
  if (sse == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 / (sse / n));
}

int MaxAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(int{a[i]} - int{b[i]}));
  return m;
}

}  // namespace stoker::data_service::image::testing
