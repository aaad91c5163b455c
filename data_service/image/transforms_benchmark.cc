// Single-thread throughput of DecodeAndTransform on the JPEG and PNG files of a directory:
// decode + evaluation transform (Resize + CenterCrop) and decode + training transform
// (RandomResizedCrop + flip), images per CPU-second of one thread (images/s per core).
// Files are read into memory first, so only decoding and transforming are timed. Each
// transform is also split in two: "*_decode" decodes exactly the rows and columns the
// transform decodes (same scale and region, recorded from a traced run) into a no-op
// sink, so "*" minus "*_decode" is the resampler's share. The cases run in --rounds
// interleaved rounds (a shared machine drifts); the best and median round are printed.
// bench_vs_torchvision.py runs it next to torchvision + Pillow on the same files.
//
//   transforms_benchmark --dir=/tmp/jpegs --seconds=2 --rounds=3
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
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "data_service/image/decode.h"
#include "data_service/image/transforms.h"

ABSL_FLAG(std::string, dir, "", "directory with the .jpg/.jpeg/.png files to decode");
ABSL_FLAG(double, seconds, 2.0, "CPU seconds per case and round");
ABSL_FLAG(int, rounds, 3, "interleaved rounds of all cases");
ABSL_FLAG(bool, fast_idct, stoker::data_service::image::TransformSpec().decode.fast_idct,
          "DecodeOptions::fast_idct (default: the transforms' default)");
ABSL_FLAG(bool, fancy_upsampling,
          stoker::data_service::image::TransformSpec().decode.fancy_upsampling,
          "DecodeOptions::fancy_upsampling (default: the transforms' default)");
ABSL_FLAG(bool, fast_huffman, stoker::data_service::image::TransformSpec().decode.fast_huffman,
          "DecodeOptions::fast_huffman: Stoker's Huffman decoder instead of libjpeg's");
ABSL_FLAG(int, size, 224, "output size (RandomResizedCrop and CenterCrop)");
ABSL_FLAG(int, resize, 256, "evaluation Resize() shorter side");
ABSL_FLAG(std::string, dct_scales, "pow2",
          "DCT-domain scales JPEGs may be decoded at: none, pow2 (1/2, 1/4, 1/8) or all (n/8)");

constexpr char kUsage[] =
    "transforms_benchmark --dir=DIR [--seconds=S] [--rounds=N]: decode and transform speed "
    "per case";

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

// Runs `one(pass, i)` over the files round-robin until `seconds` of CPU time have passed.
template <typename F>
absl::StatusOr<Result> Measure(size_t files, double seconds, F one) {
  // Warm up the scratch buffers and caches with one pass.
  for (size_t i = 0; i < files; ++i) {
    absl::Status status = one(0, i);
    if (!status.ok()) return status;
  }
  const auto wall_start = Clock::now();
  const double cpu_start = CpuSeconds();
  int64_t done = 0;
  double cpu = 0.0;
  for (int pass = 0; cpu < seconds; ++pass) {
    for (size_t i = 0; i < files; ++i) {
      absl::Status status = one(pass, i);
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
  for (TransformSpec* spec : {&eval, &train}) {
    spec->decode.fast_idct = absl::GetFlag(FLAGS_fast_idct);
    spec->decode.fancy_upsampling = absl::GetFlag(FLAGS_fancy_upsampling);
    spec->decode.fast_huffman = absl::GetFlag(FLAGS_fast_huffman);
  }
  TransformScratch scratch;
  std::vector<uint8_t> out(static_cast<size_t>(size) * size * 3);

  // Training keys cycle through kEpochs epochs, so each file is seen with several crops.
  constexpr int kEpochs = 4;
  auto train_key = [&](int pass, size_t i) {
    return SampleKey{1, pass % kEpochs, static_cast<int64_t>(i)};
  };
  // What each transform decodes, for the *_decode cases.
  std::vector<TransformTrace> eval_traces(files.size());
  std::vector<TransformTrace> train_traces(files.size() * kEpochs);
  for (size_t i = 0; i < files.size(); ++i) {
    absl::Status status =
        DecodeAndTransform(files[i], eval, SampleKey{}, scratch, out.data(), &eval_traces[i]);
    for (int e = 0; e < kEpochs && status.ok(); ++e) {
      status = DecodeAndTransform(files[i], train, train_key(e, i), scratch, out.data(),
                                  &train_traces[i * kEpochs + e]);
    }
    if (!status.ok()) {
      std::fprintf(stderr, "transforms_benchmark: %s: %s\n", names[i].c_str(),
                   std::string(status.message()).c_str());
      return 1;
    }
  }
  ImageDecoder decoder;
  auto decode_only = [&](size_t i, const TransformTrace& trace, const DecodeOptions& options) {
    absl::StatusOr<ImageHeader> header = decoder.ReadHeader(files[i], options);
    if (!header.ok()) return header.status();
    return decoder.Decode(trace.scale, trace.decoded, [](int, const uint8_t*) {});
  };

  std::printf(
      "files=%zu dct_scales=%s fast_idct=%d fancy_upsampling=%d fast_huffman=%d "
      "output=%dx%d\n",
      files.size(), scales.c_str(), eval.decode.fast_idct, eval.decode.fancy_upsampling,
      eval.decode.fast_huffman, size, size);
  const struct {
    const char* name;
    std::function<absl::Status(int, size_t)> one;
  } cases[] = {
      {"decode_full", [&](int, size_t i) { return DecodeImage(files[i]).status(); }},
      {"eval",
       [&](int, size_t i) {
         return DecodeAndTransform(files[i], eval, SampleKey{}, scratch, out.data());
       }},
      {"eval_decode", [&](int, size_t i) { return decode_only(i, eval_traces[i], eval.decode); }},
      {"train",
       [&](int pass, size_t i) {
         return DecodeAndTransform(files[i], train, train_key(pass, i), scratch, out.data());
       }},
      {"train_decode",
       [&](int pass, size_t i) {
         return decode_only(i, train_traces[i * kEpochs + pass % kEpochs], train.decode);
       }},
  };
  constexpr int kCases = sizeof(cases) / sizeof(cases[0]);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  std::vector<std::vector<double>> rates(kCases);
  for (int round = 0; round < rounds; ++round) {
    for (int c = 0; c < kCases; ++c) {
      auto result = Measure(files.size(), seconds, cases[c].one);
      if (!result.ok()) {
        std::fprintf(stderr, "transforms_benchmark: %s: %s\n", cases[c].name,
                     std::string(result.status().message()).c_str());
        return 1;
      }
      rates[c].push_back(result->images_per_cpu_second);
    }
  }
  for (int c = 0; c < kCases; ++c) {
    std::vector<double> r = rates[c];
    std::sort(r.begin(), r.end());
    std::printf("%-12s best images_per_s=%7.1f cpu_us_per_image=%7.1f  median %7.1f  rounds:",
                cases[c].name, r.back(), 1e6 / r.back(), r[r.size() / 2]);
    for (double v : rates[c]) std::printf(" %.1f", v);
    std::printf("\n");
  }
  std::printf("scratch_bytes=%zu\n", scratch.capacity_bytes());
  return 0;
}

}  // namespace
}  // namespace stoker::data_service::image

int main(int argc, char** argv) {
  stoker::ParseFlagsOrExit(
      argc, argv,
      stoker::FlagSpecOf("transforms_benchmark", "data_service/image/transforms_benchmark.cc"),
      kUsage);
  return stoker::data_service::image::Run();
}
