// Test-only helpers shared by data_service's tests: unique names, ring requests, and
// writing small JPEG and PNG files. Python snippets run through common/testing/python_runner.h.
#ifndef STOKER_DATA_SERVICE_TEST_UTIL_H_
#define STOKER_DATA_SERVICE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data_service/ring/wire_types.h"

namespace stoker::data_service::test_util {

// 16 random hex digits, for names that must not collide between concurrent test runs
// (the process id does not do: Bazel's sandbox gives every test the same pid).
std::string UniqueId();

// `rgb` (width x height x 3, tightly packed) encoded as a baseline 4:4:4 JPEG.
std::vector<uint8_t> JpegBytes(int width, int height, const std::vector<uint8_t>& rgb,
                               int quality = 95);

// `rgb` encoded as a JPEG with turbojpeg's chroma subsampling `tj_subsampling` (TJSAMP_*),
// progressive or baseline. Empty if the encoder fails.
std::vector<uint8_t> EncodeJpeg(int width, int height, const std::vector<uint8_t>& rgb, int quality,
                                int tj_subsampling, bool progressive);

// Writes `rgb` (width x height x 3, tightly packed) as a baseline JPEG at `path`.
absl::Status WriteJpeg(const std::string& path, int width, int height,
                       const std::vector<uint8_t>& rgb, int quality = 95);

// Writes `rgb` (width x height x 3, tightly packed) as an 8-bit RGB PNG at `path`.
absl::Status WritePng(const std::string& path, int width, int height,
                      const std::vector<uint8_t>& rgb);

// A width x height RGB image with smooth gradients, a few blocks and a little noise,
// different for each `seed`: compresses and decodes like a photograph, not like noise.
std::vector<uint8_t> PhotoLikeImage(int width, int height, uint64_t seed);

// The whole content of the file at `path` (empty if it cannot be read).
std::vector<uint8_t> ReadFileBytes(const std::string& path);

// Writes `bytes` to `path`, replacing it.
absl::Status WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes);

// Unusable image files, each named for what is wrong with it, written into `dir`:
//   corrupt.jpg    JPEG magic, then text (a broken header)
//   truncated.jpg  a real JPEG cut right after its scan header (no pixel data)
//   empty.jpg      zero bytes
//   text.jpg       a text file named like an image
//   bomb.jpg       a real JPEG whose header claims 30000 x 30000 pixels
// Returns their file names in that order.
absl::StatusOr<std::vector<std::string>> WriteBadImageFiles(const std::string& dir);

// A request of `rank` of `world` for training batches of `batch_size` images of
// `image_size` x `image_size` pixels, through a ring of 3 slots.
RingRequest TrainRequest(int rank, int world, int batch_size, int image_size);

// A directory for the test's files: $TEST_TMPDIR (Bazel) or /tmp, plus `name`, created.
std::string TestDirectory(const std::string& name);

}  // namespace stoker::data_service::test_util

#endif  // STOKER_DATA_SERVICE_TEST_UTIL_H_
