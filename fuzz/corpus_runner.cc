// The main() of a fuzz target in an ordinary build (no libFuzzer): runs the target's entry
// point, LLVMFuzzerTestOneInput(), once over each input named on the command line, so that
// every build compiles the fuzz targets against the real libraries and a test can run them
// over their seed corpora. Under --config=fuzz, libFuzzer's own main() takes its place.
//
//   control_protocol_fuzzer FILE_OR_DIRECTORY...
//
// A file is one input; a directory's regular files are inputs, in name order. Arguments
// that start with '-' (libFuzzer's options) are ignored. A finding aborts inside the
// target; this exits 1 when a path cannot be read or there is no input at all, else 0.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// Appends `path` (a file) or the regular files inside it (a directory) to `inputs`.
bool AddInputs(const std::filesystem::path& path, std::vector<std::filesystem::path>* inputs) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
      if (entry.is_regular_file(error)) files.push_back(entry.path());
    }
    if (error) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), error.message().c_str());
      return false;
    }
    std::sort(files.begin(), files.end());
    inputs->insert(inputs->end(), files.begin(), files.end());
    return true;
  }
  if (!std::filesystem::is_regular_file(path, error)) {
    std::fprintf(stderr, "%s: not a file or directory\n", path.c_str());
    return false;
  }
  inputs->push_back(path);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    if (!AddInputs(argv[i], &inputs)) return 1;
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIRECTORY... (no input given)\n", argv[0]);
    return 1;
  }
  for (const std::filesystem::path& path : inputs) {
    std::ifstream file(path, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                  std::istreambuf_iterator<char>());
    if (file.bad()) {
      std::fprintf(stderr, "%s: read failed\n", path.c_str());
      return 1;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("ran %zu inputs\n", inputs.size());
  return 0;
}
