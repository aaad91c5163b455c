// The data service's image pipeline for one sample: decode + torchvision's geometric
// transforms, written straight into a caller-provided uint8 HWC RGB buffer (a ring slot).
// Training is RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p), with the
// random numbers drawn from SampleRng(seed, epoch, index); evaluation is
// Resize(resize_size) + CenterCrop(size). Crop, resize and the JPEG decoder's DCT-domain
// downscale are fused into one antialiased resample of the crop box (Pillow's bilinear
// filter and arithmetic, see resample.h): no full-size copy of the image is ever made.
#ifndef STOKER_DATA_SERVICE_IMAGE_TRANSFORMS_H_
#define STOKER_DATA_SERVICE_IMAGE_TRANSFORMS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "data_service/image/decode.h"
#include "data_service/image/resample.h"
#include "data_service/image/sample_rng.h"

namespace stoker::data_service::image {
namespace internal {
class TransformPipeline;
}  // namespace internal

enum class TransformMode { kTrain, kEval };

// What to make of every image. The defaults are torchvision's ImageNet recipe.
struct TransformSpec {
  TransformMode mode = TransformMode::kEval;
  // Output is output_size x output_size x 3: RandomResizedCrop's size, or CenterCrop's.
  int output_size = 224;
  // Evaluation: Resize(resize_size) sets the shorter side; must be >= output_size.
  int resize_size = 256;
  // Training: RandomResizedCrop's scale and ratio ranges, RandomHorizontalFlip's p.
  double min_scale = 0.08;
  double max_scale = 1.0;
  double min_ratio = 3.0 / 4.0;
  double max_ratio = 4.0 / 3.0;
  double flip_probability = 0.5;
  // JPEGs are reconstructed the fast way (Note [Fast JPEG reconstruction] in decode.h).
  DecodeOptions decode = FastDecodeOptions();

  static TransformSpec Train(int size);
  static TransformSpec Eval(int resize_size, int crop_size);

  // InvalidArgument naming the field when the spec is unusable.
  absl::Status Validate() const;
};

// A crop in source pixels, torchvision's (i, j, h, w) = (top, left, height, width).
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

// One training sample's random choices.
struct TrainParams {
  CropBox crop;
  bool flip = false;
  bool fallback = false;  // the 10 tries failed and the centre crop was taken
};

// torchvision's RandomResizedCrop.get_params on a width x height image, step for step
// (10 tries of area ~ U(scale) * area, log-ratio ~ U(log ratio), w = round(sqrt(a * r)),
// h = round(sqrt(a / r)), accepted when 0 < w <= width and 0 < h <= height, then
// i ~ U{0..height-h}, j ~ U{0..width-w}; else the centre crop with the ratio clamped),
// and RandomHorizontalFlip's coin. The flip is drawn first, so it does not depend on how
// many tries the crop took. Rounding is Python's (half to even).
TrainParams SampleTrainParams(int width, int height, const TransformSpec& spec, SampleRng& rng);

// Resize(resize_size) + CenterCrop(output_size) on a width x height image, with
// torchvision's size computation (new long side = int(resize * long / short)) and
// rounding of the crop offsets (int(round((resized - crop) / 2.0))).
struct EvalGeometry {
  int resized_width = 0;
  int resized_height = 0;
  int crop_top = 0;
  int crop_left = 0;
};
EvalGeometry ComputeEvalGeometry(int width, int height, const TransformSpec& spec);

// How one sample's output axes sample the full-size width x height image (resample.h's
// AxisMap), whether it is mirrored, and the choices behind them: the geometry that
// DecodeAndTransform() applies and that a deferred sample carries to the trainer.
struct SampleGeometry {
  AxisMap x;
  AxisMap y;
  bool flip = false;
  TrainParams train;  // kTrain
  EvalGeometry eval;  // kEval
};

// The geometry of a sample of a width x height image under `spec` (which must be valid):
// evaluation resizes the whole image and keeps a window of the result; training resizes
// the crop alone, its crop and flip drawn from SampleRng(*key), or taken from `*fixed`
// when `fixed` is set (InvalidArgument if that crop is outside the image).
absl::StatusOr<SampleGeometry> PlanSampleGeometry(int width, int height, const TransformSpec& spec,
                                                  const SampleKey* key,
                                                  const TrainParams* fixed = nullptr);

// What one DecodeAndTransform() did: for tests, statistics and debugging.
struct TransformTrace {
  ImageHeader header;
  ScaleFactor scale;  // DCT-domain scale the JPEG was decoded at (1/1 for PNG)
  PixelRect decoded;  // rows and columns decoded, in the scaled image
  TrainParams train;  // kTrain
  EvalGeometry eval;  // kEval
  // Set before the call to time the resampling of the decoded rows into resize_ns (the
  // rest of the call is decoding); off, nothing is timed.
  bool time_resize = false;
  int64_t resize_ns = 0;
};

// The per-thread working memory of DecodeAndTransform(): the decoder with its row
// buffers, the filter taps and the resampler's row window and intermediate image. Buffers grow to
// the largest image seen and are then reused, so steady state allocates nothing of Stoker's own
// (libjpeg/libpng keep small per-image pools of their own); ReleaseBuffers() gives back what an
// outlier grew them to. Not thread-safe: one per worker thread.
class TransformScratch {
 public:
  TransformScratch() = default;
  TransformScratch(const TransformScratch&) = delete;
  TransformScratch& operator=(const TransformScratch&) = delete;

  // Bytes currently held by the reusable buffers (the service reports it).
  size_t capacity_bytes() const;

  // Frees every reusable buffer (capacity_bytes() becomes 0), so that one outlier image
  // does not keep its memory for the rest of the run; results do not change.
  void ReleaseBuffers();

 private:
  friend class internal::TransformPipeline;
  ImageDecoder decoder_;
  AxisTaps horizontal_;
  AxisTaps vertical_;
  RgbResampler resampler_;
};

// Decodes `bytes` (JPEG or PNG, detected from the bytes) and writes the transformed
// sample to `dst`: spec.output_size rows of spec.output_size RGB pixels, uint8 HWC,
// contiguous (output_size^2 * 3 bytes). Training draws its crop and flip from
// SampleRng(key), so the output is a pure function of (bytes, spec, key); evaluation
// ignores `key`. InvalidArgument for a bad spec or a bad image (the message says what is
// wrong; the caller adds the file name). `dst` is unspecified after an error.
absl::Status DecodeAndTransform(absl::Span<const uint8_t> bytes, const TransformSpec& spec,
                                const SampleKey& key, TransformScratch& scratch, uint8_t* dst,
                                TransformTrace* trace = nullptr);

// The training transform with its random choices given (tests, replays): spec.mode must
// be kTrain and params.crop inside the image.
absl::Status DecodeAndTransformWithParams(absl::Span<const uint8_t> bytes,
                                          const TransformSpec& spec, const TrainParams& params,
                                          TransformScratch& scratch, uint8_t* dst,
                                          TransformTrace* trace = nullptr);

}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_TRANSFORMS_H_
