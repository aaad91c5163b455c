// Single-thread throughput of DecodeAndTransform on the JPEG and PNG files of a directory:
// decode + evaluation transform (Resize + CenterCrop) and decode + training transform
// (RandomResizedCrop + flip), images per CPU-second of one thread (images/s per core).
// Files are read into memory first, so only decoding and transforming are timed. bench_vs_torchvision.py runs it
// next to torchvision + Pillow on the same files.
//
//   transforms_benchmark --dir=/tmp/jpegs --seconds=5
#include <dirent.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data_service/image/decode.h"
#include "data_service/image/transforms.h"

ABSL_FLAG(std::string, dir, "", "directory with the .jpg/.jpeg/.png files to decode");
ABSL_FLAG(double, seconds, 3.0, "CPU seconds per measurement");
ABSL_FLAG(int, size, 224, "output size (RandomResizedCrop and CenterCrop)");
ABSL_FLAG(int, resize, 256, "evaluation Resize() shorter side");
ABSL_FLAG(std::string, dct_scales, "pow2",
          "DCT-domain scales JPEGs may be decoded at: none, pow2 (1/2, 1/4, 1/8) or all (n/8)");

namespace stoker::data_service::image {
namespace {

using Clock = std::chrono::steady_clock;

// CPU time of this process: on a shared machine, time spent waiting for a core is not
// the pipeline's cost, so rates are per CPU-second ("per core").
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Result {
  double images_per_cpu_second = 0.0;
  double images_per_wall_second = 0.0;
  int64_t images = 0;
};

// Runs `one(i)` over the files round-robin until `seconds` of CPU time have passed.
template <typename F>
absl::StatusOr<Result> Measure(size_t files, double seconds, F one) {
  // Warm up the scratch buffers and caches with one pass.
  for (size_t i = 0; i < files; ++i) {
    absl::Status status = one(i);
    if (!status.ok()) return status;
  }
  const auto wall_start = Clock::now();
  const double cpu_start = CpuSeconds();
  int64_t done = 0;
  double cpu = 0.0;
  while (cpu < seconds) {
    for (size_t i = 0; i < files; ++i) {
      absl::Status status = one(i);
      if (!status.ok()) return status;
    }
    done += files;
    cpu = CpuSeconds() - cpu_start;
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall_start).count();
  return Result{done / cpu, done / wall, done};
}

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    std::fprintf(stderr, "transforms_benchmark: --dir is required\n");
    return 2;
  }
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (absl::EndsWith(name, ".jpg") || absl::EndsWith(name, ".jpeg") ||
          absl::EndsWith(name, ".png")) {
        names.push_back(name);
      }
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    std::fprintf(stderr, "transforms_benchmark: no .jpg/.png files in %s\n", dir.c_str());
    return 2;
  }
  std::vector<std::vector<uint8_t>> files;
  for (const std::string& name : names) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  const int size = absl::GetFlag(FLAGS_size);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  TransformSpec eval = TransformSpec::Eval(absl::GetFlag(FLAGS_resize), size);
  TransformSpec train = TransformSpec::Train(size);
  const std::string scales = absl::GetFlag(FLAGS_dct_scales);
  DctScaling scaling = DctScaling::kPowerOfTwo;
  if (scales == "none") {
    scaling = DctScaling::kNone;
  } else if (scales == "all") {
    scaling = DctScaling::kAll;
  } else if (scales != "pow2") {
    std::fprintf(stderr, "transforms_benchmark: --dct_scales must be none, pow2 or all\n");
    return 2;
  }
  eval.decode.dct_scaling = scaling;
  train.decode.dct_scaling = scaling;
  TransformScratch scratch;
  std::vector<uint8_t> out(static_cast<size_t>(size) * size * 3);
  int64_t counter = 0;

  std::printf("files=%zu dct_scales=%s output=%dx%d\n", files.size(), scales.c_str(), size,
              size);
  const struct {
    const char* name;
    std::function<absl::Status(size_t)> one;
  } cases[] = {
      {"decode_full", [&](size_t i) { return DecodeImage(files[i]).status(); }},
      {"eval", [&](size_t i) {
         return DecodeAndTransform(files[i], eval, SampleKey{}, scratch, out.data());
       }},
      {"train", [&](size_t i) {
         return DecodeAndTransform(files[i], train, SampleKey{1, 0, counter++}, scratch,
                                   out.data());
       }},
  };
  for (const auto& c : cases) {
    auto result = Measure(files.size(), seconds, c.one);
    if (!result.ok()) {
      std::fprintf(stderr, "transforms_benchmark: %s: %s\n", c.name,
                   std::string(result.status().message()).c_str());
      return 1;
    }
    std::printf("%s images_per_s=%.1f cpu_us_per_image=%.1f wall_images_per_s=%.1f "
                "images=%lld\n",
                c.name, result->images_per_cpu_second, 1e6 / result->images_per_cpu_second,
                result->images_per_wall_second, static_cast<long long>(result->images));
  }
  std::printf("scratch_bytes=%zu\n", scratch.capacity_bytes());
  return 0;
}

}  // namespace
}  // namespace stoker::data_service::image

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return stoker::data_service::image::Run();
}
