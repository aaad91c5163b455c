#include "launcher/testing/process_probe.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"

namespace stoker::launcher::testing {

bool IsProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  std::string stat = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  if (stat.empty()) return false;
  // "pid (comm) S ...": the state follows the last ')'.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

bool WaitForProcessExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (IsProcessAlive(pid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

bool WaitForFile(absl::string_view path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (ReadFileOrEmpty(path).empty()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

std::string ReadFileOrEmpty(absl::string_view path) {
  std::ifstream in{std::string(path)};
  if (!in) return "";
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::vector<pid_t> ReadPidFiles(absl::string_view dir) {
  std::vector<pid_t> pids;
  for (const std::string& name : ::stoker::testing::ListEntries(dir)) {
    if (!absl::EndsWith(name, ".pid")) continue;
    int pid = 0;
    std::string text = ReadFileOrEmpty(absl::StrCat(dir, "/", name));
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid)) pids.push_back(pid);
  }
  return pids;
}

bool PathExists(absl::string_view path) {
  struct stat info;
  return lstat(std::string(path).c_str(), &info) == 0;
}

std::string Runfile(absl::string_view path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

}  // namespace stoker::launcher::testing
