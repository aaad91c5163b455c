// Runs a Python program for tests through popen(3) under coreutils `timeout`.
#include "common/testing/python_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/errno_status.h"

namespace stoker::testing {
namespace {

// Quotes `word` for /bin/sh.
std::string ShellQuote(absl::string_view word) {
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return (dir != nullptr && *dir != '\0') ? dir : "/tmp";
}

}  // namespace

std::string TempPath(absl::string_view name) { return absl::StrCat(TempDir(), "/", name); }

namespace {

// Creates an empty file from the mkstemp pattern `prefix`XXXXXX and returns its name.
absl::StatusOr<std::string> MakeTempFile(const std::string& prefix) {
  std::string name = absl::StrCat(TempDir(), "/", prefix, "XXXXXX");
  const int fd = mkstemp(name.data());
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("mkstemp ", name));
  close(fd);
  return name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

std::string PythonInterpreter() {
  const char* env = std::getenv("STOKER_PYTHON");
  return (env != nullptr && *env != '\0') ? env : "python3";
}

absl::StatusOr<std::string> RunPython(absl::string_view script,
                                      const std::vector<std::string>& args, int timeout_s) {
  absl::StatusOr<std::string> script_path = MakeTempFile("stoker_script_");
  if (!script_path.ok()) return script_path.status();
  absl::Cleanup remove_script = [&] { unlink(script_path->c_str()); };
  absl::StatusOr<std::string> stderr_path = MakeTempFile("stoker_stderr_");
  if (!stderr_path.ok()) return stderr_path.status();
  absl::Cleanup remove_stderr = [&] { unlink(stderr_path->c_str()); };
  {
    std::ofstream out(*script_path, std::ios::binary);
    out << script;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", *script_path));
  }

  const std::string python = PythonInterpreter();
  std::string command = absl::StrCat("timeout -k 5 ", timeout_s, " ", ShellQuote(python), " ",
                                     ShellQuote(*script_path));
  for (const std::string& arg : args) absl::StrAppend(&command, " ", ShellQuote(arg));
  absl::StrAppend(&command, " 2>", ShellQuote(*stderr_path));

  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return ErrnoToStatus(errno, absl::StrCat("popen `", command, "`"));
  std::string output;
  char buffer[1 << 16];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  const int status = pclose(pipe);
  if (status == -1) return ErrnoToStatus(errno, "pclose");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return absl::InternalError(
        absl::StrCat("`", python, "` (from $STOKER_PYTHON, else python3) failed with exit code ",
                     code, code == 124 ? " (timed out)" : "", ". Its stderr:\n",
                     ReadAll(*stderr_path), "\nIts stdout:\n", output));
  }
  return output;
}

}  // namespace stoker::testing
