// libFuzzer target for the data service's image readers: any bytes go through the format
// sniffing, the JPEG (libjpeg-turbo) and PNG (libpng) decoders and the fused
// crop-resize into a sample buffer of exactly the output's size, as a decode thread runs
// them (one TransformScratch reused across inputs), with a decompression-bomb limit, and
// the marker walk that picks JPEGs for the GPU (PlanDeferredJpeg into a sample's place).
// Every input must either give a sample or an InvalidArgument status: never a crash, an
// out-of-bounds access, undefined behaviour, or memory beyond the limit. Built as
// //fuzz:image_decode_fuzzer; tools/fuzz.sh runs it under libFuzzer with ASan and UBSan.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "data_service/image/decode.h"
#include "data_service/image/deferred_jpeg.h"
#include "data_service/image/sample_rng.h"
#include "data_service/image/transforms.h"

namespace stoker::data_service::image {
namespace {

// The decompression-bomb limit of these runs: large enough for every seed, small enough
// that a header claiming a huge image is refused before anything image-sized is allocated
// (the service's default is Pillow's, 2 * 89478485 pixels).
constexpr int64_t kFuzzMaxPixels = int64_t{1} << 22;
constexpr int kOutputSize = 24;

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "image_decode_fuzzer: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

void CheckError(const char* what, const absl::Status& status) {
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) {
    Fail(what, status);  // malformed input must be InvalidArgument, nothing else
  }
}

// The input before the current one: a fault that needs state left by it is replayed by
// running the fuzzer on both files, previous first.
std::vector<uint8_t>& Previous() {
  static auto* previous = new std::vector<uint8_t>;
  return *previous;
}

void SavePrevious() {
  const char* path = std::getenv("FUZZ_PREVIOUS_INPUT");
  FILE* f = std::fopen(path != nullptr ? path : "previous_input", "wb");
  if (f == nullptr) return;
  std::fwrite(Previous().data(), 1, Previous().size(), f);
  std::fclose(f);
}

uint64_t Mix(const uint8_t* data, size_t size) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ size;
  for (size_t i = 0; i < size && i < 64; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  if (size > 0) h = (h ^ data[size - 1]) * 0x100000001b3ull;
  return h;
}

}  // namespace
}  // namespace stoker::data_service::image

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::data_service::image;
  const absl::Span<const uint8_t> bytes(data, size);
  const uint64_t h = Mix(data, size);

  absl::StatusOr<ImageFormat> format = DetectImageFormat(bytes);
  CheckError("DetectImageFormat", format.status());

  DecodeOptions options;
  options.max_pixels = kFuzzMaxPixels;
  options.dct_scaling = static_cast<DctScaling>(h % 3);

  // A whole image at full size.
  absl::StatusOr<DecodedImage> image = DecodeImage(bytes, options);
  CheckError("DecodeImage", image.status());
  if (image.ok()) {
    if (!format.ok()) Fail("decoded an image whose format was not detected", format.status());
    if (static_cast<int64_t>(image->width) * image->height > kFuzzMaxPixels ||
        image->rgb.size() != static_cast<size_t>(image->width) * image->height * 3) {
      Fail("decoded image has the wrong size", absl::OkStatus());
    }
  }

  // The decode thread's path: a reused scratch, the output written into a buffer of
  // exactly one sample (heap-allocated so that ASan sees any write past it).
  static TransformScratch* scratch = new TransformScratch;
  TransformSpec spec = (h >> 8) % 2 == 0 ? TransformSpec::Train(kOutputSize)
                                         : TransformSpec::Eval(kOutputSize + 4, kOutputSize);
  spec.decode = options;
  const size_t sample_bytes = size_t{kOutputSize} * kOutputSize * 3;
  std::unique_ptr<uint8_t[]> sample(new uint8_t[sample_bytes]);
  SampleKey key;
  key.seed = h;
  key.epoch = static_cast<int64_t>(h >> 32) & 7;
  key.index = static_cast<int64_t>(size);
  absl::Status transformed = DecodeAndTransform(bytes, spec, key, *scratch, sample.get());
  CheckError("DecodeAndTransform", transformed);
  if (transformed.ok() != image.ok()) {
    // Both read the same header with the same limit; the transform decodes a part of the
    // image, so it may succeed on data truncated after that part, never fail on a good one.
    if (!transformed.ok()) {
      // Tell a fault of the reused scratch (state left by an earlier input) from one of
      // the image itself, and keep the earlier input so the pair can be replayed.
      TransformScratch fresh;
      const absl::Status again = DecodeAndTransform(bytes, spec, key, fresh, sample.get());
      SavePrevious();
      Fail(again.ok() ? "the transform failed with a reused scratch (ok with a fresh one; the "
                        "previous input is in previous_input)"
                      : "the transform failed on an image DecodeImage reads",
           transformed);
    }
  }
  // The deferred path: a header and the bytes in a place of exactly one sample, or nothing.
  std::unique_ptr<uint8_t[]> place(new uint8_t[sample_bytes]);
  const std::optional<stoker::data_service::DeferredSampleHeader> deferred =
      PlanDeferredJpeg(bytes, spec, key, sample_bytes);
  if (deferred.has_value()) {
    if (deferred->encoded_bytes != size || size + sizeof(*deferred) > sample_bytes ||
        static_cast<int64_t>(deferred->width) * deferred->height > kFuzzMaxPixels) {
      Fail("a deferred sample that does not fit its place or the limit", absl::OkStatus());
    }
    WriteDeferredSample(*deferred, bytes, place.get());
  }
  Previous().assign(data, data + size);
  if (!transformed.ok() && std::getenv("STOKER_FUZZ_FRESH_SCRATCH_AFTER_ERROR") != nullptr) {
    // Steps around a known fault of the reused decoder after an error (to look for others).
    delete scratch;
    scratch = new TransformScratch;
  }
  if (scratch->capacity_bytes() > size_t{64} << 20) {
    Fail("the reused scratch grew past 64 MiB", absl::OkStatus());
  }
  return 0;
}
