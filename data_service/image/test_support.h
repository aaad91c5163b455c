// Test helpers for the image pipeline: running the Python generators of test images and
// reference outputs (Pillow, torchvision) inside the test's TEST_TMPDIR, reading files,
// and comparing images.
#ifndef STOKER_DATA_SERVICE_IMAGE_TEST_SUPPORT_H_
#define STOKER_DATA_SERVICE_IMAGE_TEST_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace stoker::data_service::image::testing {

// Runs `$STOKER_PYTHON <runfiles>/data_service/image/testdata_tools/<script> <args...>`
// (python3 when STOKER_PYTHON is unset), with its output going to the test log. Kills it
// after `timeout`. FailedPrecondition with the exit status when it fails.
absl::Status RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                           absl::Duration timeout = absl::Minutes(4));

// The directory that `make_image_cases.py <command> <dir> <extra...>` wrote its cases into.
// Runs the generator the first time `command` is asked for in this test binary; a failure
// to run it is a test failure. Not thread-safe.
const std::string& ImageCaseDir(const std::string& command,
                                const std::vector<std::string>& extra = {});

absl::StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path);

// The bytes of the file at `path`; empty, and a test failure, when it cannot be read.
std::vector<uint8_t> LoadFileOrFail(const std::string& path);

// Whitespace-separated fields of each non-empty line of a text file.
absl::StatusOr<std::vector<std::vector<std::string>>> ReadTable(const std::string& path);

// Peak signal-to-noise ratio of two uint8 buffers in dB (infinity when equal).
double Psnr(const uint8_t* a, const uint8_t* b, size_t n);

// Largest absolute difference of two uint8 buffers.
int MaxAbsDiff(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace stoker::data_service::image::testing

#endif  // STOKER_DATA_SERVICE_IMAGE_TEST_SUPPORT_H_
