// Encoded images -> samples: reading a whole image file, or a byte range of a shard, into
// a worker's reusable SampleScratch buffer, and decoding those bytes into a finished
// sample with //data_service/image (training: RandomResizedCrop + flip seeded by
// (seed, epoch, index); evaluation: Resize + CenterCrop) written straight to its place in
// a ring slot. The ImageFolder and packed datasets are both built on these, as
// EncodedImageDatasets.
#ifndef STOKER_DATA_SERVICE_DATASET_ENCODED_IMAGE_H_
#define STOKER_DATA_SERVICE_DATASET_ENCODED_IMAGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data_service/dataset/dataset.h"
#include "data_service/image/transforms.h"

namespace stoker::data_service {

// Files larger than this are refused before they are read.
inline constexpr int64_t kMaxImageFileBytes = int64_t{1} << 30;

// Reads the regular file at `path` into `buffer` (grown when too small, never shrunk) and
// returns its bytes. The file is opened non-blocking, so a FIFO or device named like an
// image cannot hang the caller. Errors that concern the file (missing, permission
// denied, not a regular file, too large, read error, shrank while read) are marked with
// MarkBadSample(); running out of file descriptors or memory is not. Messages do not
// repeat `path` (the caller's Describe() names it). Thread-safe for distinct buffers.
absl::StatusOr<absl::Span<const uint8_t>> ReadImageFile(const std::string& path,
                                                        std::vector<uint8_t>* buffer);

// Reads `length` bytes at `offset` of the open file `fd` (a shard) into `buffer`, as
// ReadImageFile() does. A range past the end of the file is a marked DataLoss error.
absl::StatusOr<absl::Span<const uint8_t>> ReadFileRange(int fd, uint64_t offset, uint32_t length,
                                                        std::vector<uint8_t>* buffer);

// The transform a sample gets: TransformSpec::Train(image_size), or
// TransformSpec::Eval(eval_resize, image_size), with options.max_pixels as the
// decompression-bomb limit. InvalidArgument (not a bad-sample error) for unusable options.
absl::StatusOr<image::TransformSpec> SampleTransform(const SampleOptions& options);

// Decodes the encoded image `bytes` (JPEG or PNG) of sample `index` and writes the
// transformed sample to `dst` (options.image_size^2 * 3 bytes). The training crop and
// flip come from SampleKey{options.seed, options.epoch, index}. A corrupt, truncated,
// empty, oversized or non-image input gives a marked InvalidArgument error.
absl::Status DecodeSample(absl::Span<const uint8_t> bytes, int64_t index,
                          const SampleOptions& options, SampleScratch& scratch, uint8_t* dst);

// A Dataset of named classes whose samples are stored encoded (image files, or byte ranges
// of shards): Load() decodes exactly what ReadEncoded() reads, with DecodeSample().
// Immutable after creation and thread-safe, as Dataset requires.
class EncodedImageDataset : public Dataset {
 public:
  int32_t num_classes() const final { return static_cast<int32_t>(classes_.size()); }
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const final;

  // The class names, in label order.
  const std::vector<std::string>& classes() const { return classes_; }

 protected:
  EncodedImageDataset() = default;
  explicit EncodedImageDataset(std::vector<std::string> classes) : classes_(std::move(classes)) {}
  // For a dataset that reads its class names after it is made.
  void set_classes(std::vector<std::string> classes) { classes_ = std::move(classes); }

 private:
  std::vector<std::string> classes_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_ENCODED_IMAGE_H_
