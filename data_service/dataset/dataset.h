// The Dataset interface: what the service needs from a dataset, "sample i -> (label, RGB
// image of S x S written into a destination)", and the per-thread SampleScratch that
// loading uses. Implementations: SyntheticDataset (no files), ImageFolderDataset
// (torchvision's folder layout) and PackedDataset (an index plus large shard files).
#ifndef STOKER_DATA_SERVICE_DATASET_DATASET_H_
#define STOKER_DATA_SERVICE_DATASET_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/seed_mix.h"
#include "data_service/image/decode.h"
#include "data_service/image/transforms.h"

namespace stoker::data_service {

// How one sample is to be produced. Augmentation randomness must be a pure function of
// (seed, epoch, sample index).
struct SampleOptions {
  int32_t image_size = 0;  // output is image_size x image_size x 3
  bool train = true;       // training augmentation, or the deterministic evaluation path
  uint64_t seed = 0;       // the epoch's sampler seed
  int64_t epoch = 0;
  // Evaluation: Resize()'s shorter side before CenterCrop(image_size); 0 means
  // EvalResizeSize(image_size, kDefaultEvalResizeRatio).
  int32_t eval_resize = 0;
  // Decoded images larger than this many pixels are refused (decompression bombs).
  int64_t max_pixels = image::kDefaultMaxPixels;
  // JPEG reconstruction: Pillow's exactly (slower), or the transforms' fast one
  // (Note [Fast JPEG reconstruction] in image/decode.h).
  bool exact_jpeg = false;
};

// torchvision's ImageNet evaluation recipe: Resize(256) before CenterCrop(224).
inline constexpr double kDefaultEvalResizeRatio = 256.0 / 224.0;

// round(image_size * ratio): the evaluation Resize() for a crop of image_size.
int32_t EvalResizeSize(int32_t image_size, double ratio);

// What one Load() took, stage by stage, when SampleScratch::time_stages asks (the trace's
// per-sample figures, common/trace_events.h). A dataset without a stage leaves it 0.
struct SampleTimes {
  int64_t file_bytes = 0;  // the encoded image read
  int64_t read_us = 0;     // reading it
  int64_t decode_us = 0;   // decoding (headers, entropy decoding, IDCT, colour)
  int64_t resize_us = 0;   // resampling the decoded rows into the sample
};

// The working memory of one worker thread's Load() calls, reused sample after sample so
// that steady state allocates nothing: the encoded file's bytes and the decoder's and
// resampler's buffers. Not thread-safe: one per worker thread (WorkerPool owns them).
struct SampleScratch {
  SampleScratch() = default;
  SampleScratch(const SampleScratch&) = delete;
  SampleScratch& operator=(const SampleScratch&) = delete;

  // Bytes held by the reusable buffers.
  size_t capacity_bytes() const { return file_bytes.capacity() + transform.capacity_bytes(); }

  // An encoded image as read from disk; grows to the largest file read (see
  // kMaxRetainedFileBytes) and is reused.
  std::vector<uint8_t> file_bytes;
  image::TransformScratch transform;
  // Set by the caller before Load() to have it fill `times`; off, nothing is timed.
  bool time_stages = false;
  SampleTimes times;
};

// A SampleScratch::file_bytes larger than this after a sample is freed, so that one huge
// file does not keep its buffer for the rest of the run.
inline constexpr size_t kMaxRetainedFileBytes = size_t{64} << 20;

// SampleScratch::transform buffers holding more than this after a sample are freed: an
// outlier image (a PNG thousands of pixels wide, which has no DCT-domain downscale) grows
// them to several MiB, ordinary ones (ImageNet's ~500x375 photos) to well under 1 MiB.
inline constexpr size_t kMaxRetainedTransformBytes = size_t{4} << 20;

// After a sample: frees the buffers of `scratch` that an outlier grew past the limits
// above, so a decode thread's memory shrinks back to that of ordinary images.
inline void TrimSampleScratch(SampleScratch& scratch) {
  if (scratch.file_bytes.capacity() > kMaxRetainedFileBytes) {
    std::vector<uint8_t>().swap(scratch.file_bytes);
  }
  if (scratch.transform.capacity_bytes() > kMaxRetainedTransformBytes) {
    scratch.transform.ReleaseBuffers();
  }
}

// Whether a Load() error means "this sample's data is unusable" (missing, unreadable,
// empty, corrupt, truncated, not an image, too large), which --bad_files=skip may skip,
// rather than a failure of the service itself (out of memory or file descriptors, a bad
// index or option), which always stops production. Datasets say so with MarkBadSample().
bool IsBadSampleError(const absl::Status& status);

// `status` (not OK) with the mark that IsBadSampleError() looks for (a status payload).
absl::Status MarkBadSample(absl::Status status);

// A read-only indexed dataset of labelled RGB images. Implementations are immutable after
// creation and thread-safe: the service's workers call Load() concurrently, each with its
// own SampleScratch.
class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples; at least 1.
  virtual int64_t size() const = 0;
  virtual int32_t num_classes() const = 0;
  // The class of sample `index` (0 <= index < size()), in 0..num_classes()-1.
  virtual int32_t Label(int64_t index) const = 0;
  // Writes sample `index` as image_size x image_size RGB uint8, row-major HWC, to `dst`
  // (image_size * image_size * 3 bytes). The bytes depend only on (index, options).
  // OutOfRange for an index outside the dataset; an unusable sample gives an error for
  // which IsBadSampleError() holds. Messages say what is wrong; the caller adds
  // Describe(index).
  virtual absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                            uint8_t* dst) const = 0;
  // The encoded file of sample `index` (JPEG or PNG bytes as stored), read into
  // scratch.file_bytes and valid until the next use of `scratch`; Load() of the same
  // sample decodes exactly these bytes. Errors as Load()'s. Unimplemented for a dataset
  // that has no encoded form (SyntheticDataset): its samples are never deferred.
  virtual absl::StatusOr<absl::Span<const uint8_t>> ReadEncoded(int64_t index,
                                                                SampleScratch& scratch) const;
  // A short description of sample `index` for error messages ("sample 12 (train/cat/1.jpg)").
  virtual std::string Describe(int64_t index) const = 0;
};

// The seed of sample `index`'s randomness in an epoch: a SplitMix64 mix of (seed, epoch,
// index), independent of which thread produces the sample or when.
inline uint64_t AugmentationSeed(uint64_t seed, int64_t epoch, int64_t index) {
  return SplitMix64Mix(SplitMix64Mix(SplitMix64Mix(seed) ^ static_cast<uint64_t>(epoch)) ^
                       static_cast<uint64_t>(index));
}

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_DATASET_H_
