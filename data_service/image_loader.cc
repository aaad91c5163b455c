#include "data_service/image_loader.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace stoker::data_service {
namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 28;       // 268 megapixels
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;  // 1 GiB

absl::Status ReadFile(const std::string& path, std::vector<unsigned char>* bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rbe"), &std::fclose);
  if (file == nullptr) return ErrnoToStatus(errno, absl::StrCat("open image ", path));
  if (std::fseek(file.get(), 0, SEEK_END) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("seek in image ", path));
  }
  const long length = std::ftell(file.get());
  if (length < 0) return ErrnoToStatus(errno, absl::StrCat("size of image ", path));
  if (length > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("image ", path, " is ", length, " bytes, more than the limit ", kMaxFileBytes));
  }
  std::rewind(file.get());
  bytes->resize(static_cast<size_t>(length));
  if (length > 0 && std::fread(bytes->data(), 1, bytes->size(), file.get()) != bytes->size()) {
    return absl::DataLossError(absl::StrCat("short read of image ", path));
  }
  return absl::OkStatus();
}

struct TjDestroy {
  void operator()(void* handle) const { tjDestroy(handle); }
};

// One decompressor per thread: creating one allocates, and a handle is not thread-safe.
absl::StatusOr<tjhandle> ThreadDecompressor() {
  thread_local std::unique_ptr<void, TjDestroy> handle(tjInitDecompress());
  if (handle == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("tjInitDecompress: ", tjGetErrorStr2(nullptr)));
  }
  return handle.get();
}

absl::Status DecodeJpeg(const std::string& path, const std::vector<unsigned char>& bytes,
                        std::vector<uint8_t>* rgb, int* width, int* height) {
  absl::StatusOr<tjhandle> handle = ThreadDecompressor();
  if (!handle.ok()) return handle.status();
  int subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(*handle, bytes.data(), bytes.size(), width, height, &subsampling,
                          &colorspace) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image ", path, ": bad JPEG header: ", tjGetErrorStr2(*handle)));
  }
  if (*width < 1 || *height < 1 || int64_t{*width} * *height > kMaxPixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("image ", path, ": unsupported size ", *width, "x", *height));
  }
  rgb->resize(static_cast<size_t>(*width) * *height * 3);
  if (tjDecompress2(*handle, bytes.data(), bytes.size(), rgb->data(), *width, 0, *height,
                    TJPF_RGB, TJFLAG_ACCURATEDCT) != 0 &&
      tjGetErrorCode(*handle) != TJERR_WARNING) {
    return absl::InvalidArgumentError(
        absl::StrCat("image ", path, ": JPEG decode failed: ", tjGetErrorStr2(*handle)));
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

void CenterCropResize(const uint8_t* src, int width, int height, int size, uint8_t* dst) {
  const int side = std::min(width, height);
  const int x0 = (width - side) / 2;
  const int y0 = (height - side) / 2;
  const double scale = static_cast<double>(side) / size;
  // Source coordinates and weights per output column, computed once.
  std::vector<int> left(size), right(size);
  std::vector<float> right_weight(size);
  for (int i = 0; i < size; ++i) {
    const double s = std::clamp((i + 0.5) * scale - 0.5, 0.0, static_cast<double>(side - 1));
    left[i] = static_cast<int>(s);
    right[i] = std::min(left[i] + 1, side - 1);
    right_weight[i] = static_cast<float>(s - left[i]);
  }
  for (int y = 0; y < size; ++y) {
    const int top = left[y], bottom = right[y];
    const float wy = right_weight[y];
    const uint8_t* row0 = src + (static_cast<size_t>(y0 + top) * width + x0) * 3;
    const uint8_t* row1 = src + (static_cast<size_t>(y0 + bottom) * width + x0) * 3;
    uint8_t* out = dst + static_cast<size_t>(y) * size * 3;
    for (int x = 0; x < size; ++x) {
      const int l = left[x] * 3, r = right[x] * 3;
      const float wx = right_weight[x];
      for (int c = 0; c < 3; ++c) {
        const float upper = row0[l + c] + (row0[r + c] - row0[l + c]) * wx;
        const float lower = row1[l + c] + (row1[r + c] - row1[l + c]) * wx;
        const float value = upper + (lower - upper) * wy;
        out[x * 3 + c] = static_cast<uint8_t>(std::clamp(std::lround(value), 0L, 255L));
      }
    }
  }
}

}  // namespace internal

absl::Status LoadImageFile(const std::string& path, int64_t index, const SampleOptions& options,
                           uint8_t* dst) {
  (void)index;  // the centre crop draws no random numbers
  if (options.image_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_size must be positive, got ", options.image_size));
  }
  std::vector<unsigned char> bytes;
  if (absl::Status s = ReadFile(path, &bytes); !s.ok()) return s;
  const bool is_jpeg = bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
  if (!is_jpeg) {
    return absl::UnimplementedError(absl::StrCat(
        "image ", path, ": not a JPEG file; this build of data_service decodes only JPEG"));
  }
  std::vector<uint8_t> rgb;
  int width = 0, height = 0;
  if (absl::Status s = DecodeJpeg(path, bytes, &rgb, &width, &height); !s.ok()) return s;
  internal::CenterCropResize(rgb.data(), width, height, options.image_size, dst);
  return absl::OkStatus();
}

}  // namespace stoker::data_service
