#include "data_service/test_util.h"

#include <turbojpeg.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace stoker::data_service::test_util {

std::string UniqueId() {
  std::random_device device;
  const uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
  return absl::StrFormat("%016x", value);
}

std::string PythonInterpreter() {
  const char* env = std::getenv("STOKER_PYTHON");
  return (env != nullptr && *env != '\0') ? env : "python3";
}

absl::StatusOr<std::string> RunPython(const std::string& script) {
  const std::string python = PythonInterpreter();
  const std::string quoted = absl::StrReplaceAll(script, {{"'", "'\\''"}});
  const std::string command = absl::StrCat("'", python, "' -c '", quoted, "' 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::FailedPreconditionError("popen failed");
  std::string output;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  const int status = pclose(pipe);
  if (status != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "`", python, "` failed (exit status ", status,
        "; set STOKER_PYTHON to an interpreter with torch installed). Its output:\n", output));
  }
  return output;
}

absl::Status WriteJpeg(const std::string& path, int width, int height,
                       const std::vector<uint8_t>& rgb, int quality) {
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  if (tjCompress2(handle.get(), rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size, TJSAMP_444,
                  quality, TJFLAG_ACCURATEDCT) != 0) {
    return absl::InternalError(absl::StrCat("tjCompress2: ", tjGetErrorStr2(handle.get())));
  }
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, &tjFree);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr || std::fwrite(jpeg, 1, size, file.get()) != size) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string TestDirectory(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace stoker::data_service::test_util
