// pack_imagefolder: packs an ImageFolder (a folder per class of image files) into the
// packed dataset format (packed_format.h): one index file plus shard files beside it,
// with the same sample order and labels as the data service's ImageFolder reader.
//
//   pack_imagefolder --input=/data/imagenet/train --output=/data/packed/train.stkpack
//   data_service ... --dataset=packed --train_dir=/data/packed/train.stkpack
//
// With --max_short_side=N each image is stored shrunk once to a shorter side of N (as
// torchvision's Resize(N), aspect kept) and re-encoded as a JPEG of --quality, so that
// training reads and decodes fewer pixels (docs/packed_format.md: the accuracy cost).
//
// Exit codes: 0 packed; 1 otherwise, with a message naming the flag or file at fault.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "data_service/dataset/packed_writer.h"

ABSL_FLAG(std::string, input, "", "the ImageFolder to pack: <input>/<class>/.../<image>");
ABSL_FLAG(std::string, output, "",
          "the index file to write (e.g. /data/train.stkpack); shards are written beside it "
          "as <index>-NNNNN.shard");
ABSL_FLAG(int64_t, shard_bytes, int64_t{1} << 30, "target size of one shard file in bytes");
ABSL_FLAG(int32_t, max_short_side, 0,
          "store images whose shorter side is longer shrunk to this shorter side (aspect "
          "kept, antialiased bilinear as torchvision's Resize) and re-encoded as JPEG; 0: "
          "store every file as it is");
ABSL_FLAG(int32_t, quality, 90, "--max_short_side: JPEG quality of the re-encoded images (1..100)");

namespace stoker::data_service {
namespace {

int Main(int argc, char** argv) {
  ParseFlagsOrExit(
      argc, argv, FlagSpecOf("pack_imagefolder", "data_service/dataset/pack_imagefolder.cc"),
      "pack_imagefolder --input=DIR --output=INDEX [--shard_bytes=N] [--max_short_side=N "
      "--quality=Q]: packs an "
      "ImageFolder into an index file plus shard files for data_service "
      "--dataset=packed");
  const std::string input = absl::GetFlag(FLAGS_input);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (input.empty() || output.empty()) {
    std::fprintf(stderr, "pack_imagefolder: --input and --output are required\n");
    return 1;
  }
  if (absl::GetFlag(FLAGS_shard_bytes) < 1024) {
    std::fprintf(stderr, "pack_imagefolder: --shard_bytes must be at least 1024\n");
    return 1;
  }
  PackOptions options;
  options.shard_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_shard_bytes));
  options.max_short_side = absl::GetFlag(FLAGS_max_short_side);
  options.jpeg_quality = absl::GetFlag(FLAGS_quality);
  if (options.max_short_side < 0 || options.jpeg_quality < 1 || options.jpeg_quality > 100) {
    std::fprintf(stderr,
                 "pack_imagefolder: --max_short_side must be >= 0 and --quality in 1..100\n");
    return 1;
  }
  absl::Time last_report = absl::Now();
  const absl::Time start = last_report;
  absl::StatusOr<PackStats> stats =
      PackImageFolder(input, output, options, [&](int64_t done, int64_t total) {
        if (absl::Now() - last_report < absl::Seconds(10)) return;
        last_report = absl::Now();
        std::fprintf(stderr, "pack_imagefolder: %lld of %lld samples\n",
                     static_cast<long long>(done), static_cast<long long>(total));
      });
  if (!stats.ok()) {
    std::fprintf(stderr, "pack_imagefolder: %s\n", std::string(stats.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n",
              absl::StrFormat("pack_imagefolder: %d samples, %.1f MiB of images in %d shards, "
                              "index %s (%.1f s)",
                              stats->samples, stats->image_bytes / 1048576.0, stats->shards, output,
                              absl::ToDoubleSeconds(absl::Now() - start))
                  .c_str());
  if (options.max_short_side > 0) {
    std::printf("%s\n",
                absl::StrFormat("pack_imagefolder: %d images shrunk to a shorter side of "
                                "%d (quality %d): %.1f MiB of files stored as %.1f MiB",
                                stats->shrunk, options.max_short_side, options.jpeg_quality,
                                stats->source_bytes / 1048576.0, stats->image_bytes / 1048576.0)
                    .c_str());
  }
  if (stats->not_images > 0) {
    std::fprintf(stderr,
                 "pack_imagefolder: warning: %lld samples are not JPEG or PNG images; the data "
                 "service will treat them as unusable (--bad_files)\n",
                 static_cast<long long>(stats->not_images));
  }
  return 0;
}

}  // namespace
}  // namespace stoker::data_service

int main(int argc, char** argv) { return stoker::data_service::Main(argc, argv); }
