// PackedDataset: the reader of the packed format (packed_format.h). Opening reads and
// checks the whole index and opens every shard once; loading a sample is one pread() of
// its bytes from the open shard into the worker's scratch buffer, then the same decode
// and transform as ImageFolderDataset.
#ifndef STOKER_DATA_SERVICE_DATASET_PACKED_DATASET_H_
#define STOKER_DATA_SERVICE_DATASET_PACKED_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"
#include "data_service/dataset/dataset.h"
#include "data_service/dataset/encoded_image.h"
#include "data_service/dataset/packed_format.h"

namespace stoker::data_service {

// An opened packed dataset. Immutable after Open(); thread-safe (pread on shared
// descriptors).
class PackedDataset : public EncodedImageDataset {
 public:
  // Reads the index at `index_path` and opens its shards (in the index's directory).
  // NotFound for a missing index or shard; InvalidArgument (naming the file and what is
  // wrong) for a file that is not a packed index or shard of this version, or whose
  // contents are inconsistent: truncated, sections or samples out of bounds, labels or
  // shard numbers out of range, a shard whose size differs from what the index records.
  static absl::StatusOr<std::unique_ptr<PackedDataset>> Open(const std::string& index_path);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int32_t Label(int64_t index) const override { return samples_[index].label; }
  absl::StatusOr<absl::Span<const uint8_t>> ReadEncoded(int64_t index,
                                                        SampleScratch& scratch) const override;
  // "sample 12 (cat/1.jpg in /d/train.stkpack-00000.shard at byte 4096)".
  std::string Describe(int64_t index) const override;

  const std::string& index_path() const { return index_path_; }
  int32_t shard_count() const { return static_cast<int32_t>(shards_.size()); }
  // The sample's name: its path relative to the folder that was packed.
  absl::string_view SampleName(int64_t index) const;

 private:
  struct Shard {
    std::string path;
    UniqueFd fd;
  };

  PackedDataset() = default;

  std::string index_path_;
  std::vector<PackedSample> samples_;
  std::vector<Shard> shards_;
  std::string strings_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_PACKED_DATASET_H_
