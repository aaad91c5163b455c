#include "data_service/test_util.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::data_service::test_util {

std::string UniqueId() {
  std::random_device device;
  const uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
  return absl::StrFormat("%016x", value);
}

std::vector<uint8_t> JpegBytes(int width, int height, const std::vector<uint8_t>& rgb,
                               int quality) {
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  if (tjCompress2(handle.get(), rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size, TJSAMP_444,
                  quality, TJFLAG_ACCURATEDCT) != 0) {
    return {};
  }
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, &tjFree);
  return std::vector<uint8_t>(jpeg, jpeg + size);
}

std::vector<uint8_t> EncodeJpeg(int width, int height, const std::vector<uint8_t>& rgb, int quality,
                                int tj_subsampling, bool progressive) {
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int flags = TJFLAG_ACCURATEDCT | (progressive ? TJFLAG_PROGRESSIVE : 0);
  if (tjCompress2(handle.get(), rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size,
                  tj_subsampling, quality, flags) != 0) {
    return {};
  }
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, &tjFree);
  return std::vector<uint8_t>(jpeg, jpeg + size);
}

absl::Status WriteJpeg(const std::string& path, int width, int height,
                       const std::vector<uint8_t>& rgb, int quality) {
  const std::vector<uint8_t> jpeg = JpegBytes(width, height, rgb, quality);
  if (jpeg.empty()) return absl::InternalError(absl::StrCat("cannot encode JPEG for ", path));
  return WriteFileBytes(path, jpeg);
}

absl::Status WritePng(const std::string& path, int width, int height,
                      const std::vector<uint8_t>& rgb) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  if (png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr) == 0) {
    return absl::InternalError(absl::StrCat("cannot write PNG ", path, ": ", image.message));
  }
  return absl::OkStatus();
}

std::vector<uint8_t> PhotoLikeImage(int width, int height, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  int gx[3], gy[3], base[3];
  for (int c = 0; c < 3; ++c)
    gx[c] = uniform(-80, 80), gy[c] = uniform(-80, 80), base[c] = uniform(60, 190);
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int v = base[c] + gx[c] * x / std::max(1, width) + gy[c] * y / std::max(1, height) +
                      static_cast<int>(rng() % 7) - 3;
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  for (int block = 0; block < 6; ++block) {
    const int x0 = uniform(0, width - 1), y0 = uniform(0, height - 1);
    const int x1 = std::min(width, x0 + uniform(1, std::max(1, width / 3)));
    const int y1 = std::min(height, y0 + uniform(1, std::max(1, height / 3)));
    const int colour[3] = {uniform(0, 255), uniform(0, 255), uniform(0, 255)};
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        for (int c = 0; c < 3; ++c) rgb[(static_cast<size_t>(y) * width + x) * 3 + c] = colour[c];
      }
    }
  }
  return rgb;
}

std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::Status WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> WriteBadImageFiles(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::vector<uint8_t> good = JpegBytes(64, 48, PhotoLikeImage(64, 48, 99));
  // Markers: SOF0 (ff c0) carries the size, SOS (ff da) starts the scan.
  size_t sof = 0, sos = 0;
  for (size_t i = 2; i + 1 < good.size(); ++i) {
    if (good[i] != 0xff) continue;
    if (good[i + 1] == 0xc0 && sof == 0) sof = i;
    if (good[i + 1] == 0xda) {
      sos = i;
      break;
    }
  }
  if (sof == 0 || sos == 0) return absl::InternalError("no SOF0/SOS marker in a test JPEG");
  const size_t sos_header = (size_t{good[sos + 2]} << 8) | good[sos + 3];
  std::vector<uint8_t> truncated(good.begin(), good.begin() + sos + 2 + sos_header);
  std::vector<uint8_t> bomb = good;
  for (size_t at : {sof + 5, sof + 7}) {  // height, then width: 30000 = 0x7530
    bomb[at] = 0x75;
    bomb[at + 1] = 0x30;
  }
  const std::string corrupt = "\xff\xd8\xff\xe0 this is not a jpeg at all";
  const std::string text = "hello, this is not an image\n";
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"corrupt.jpg", std::vector<uint8_t>(corrupt.begin(), corrupt.end())},
      {"truncated.jpg", truncated},
      {"empty.jpg", {}},
      {"text.jpg", std::vector<uint8_t>(text.begin(), text.end())},
      {"bomb.jpg", bomb},
  };
  std::vector<std::string> names;
  for (const auto& [name, bytes] : files) {
    if (absl::Status s = WriteFileBytes(dir + "/" + name, bytes); !s.ok()) return s;
    names.push_back(name);
  }
  return names;
}

RingRequest TrainRequest(int rank, int world, int batch_size, int image_size) {
  RingRequest request;
  request.rank = rank;
  request.world_size = world;
  request.batch_size = batch_size;
  request.image_size = image_size;
  request.slot_count = 3;
  return request;
}

std::string TestDirectory(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace stoker::data_service::test_util
