// Writing the packed dataset format (packed_format.h): PackedWriter appends encoded images
// to shard files and writes the index at the end; PackImageFolder packs an ImageFolder
// with the same sample order and labels as ImageFolderDataset. The pack_imagefolder tool
// is a thin main() over PackImageFolder.
#ifndef STOKER_DATA_SERVICE_DATASET_PACKED_WRITER_H_
#define STOKER_DATA_SERVICE_DATASET_PACKED_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"
#include "data_service/dataset/packed_format.h"

namespace stoker::data_service {

struct PackOptions {
  // A new shard starts when the next image would make the current one larger than this
  // (a single larger image gets a shard of its own).
  uint64_t shard_bytes = uint64_t{1} << 30;
  // PackImageFolder: when > 0, each image whose shorter side is longer is stored shrunk
  // once, as torchvision's Resize(max_short_side) makes it (aspect kept), re-encoded as a
  // baseline JPEG of `jpeg_quality` (image/shrink.h). Smaller images and files that do
  // not decode are stored byte for byte. 0: every file byte for byte.
  int max_short_side = 0;
  int jpeg_quality = 90;  // 1..100
};

// The shard file name of shard `shard` of the index file named `index_file_name`:
// "<index_file_name>-00012.shard".
std::string PackedShardFileName(absl::string_view index_file_name, int32_t shard);

// Writes one packed dataset. Files are written under temporary names (".partial") and
// renamed into place by Finish(), the index last, each fsync'ed first: a reader never
// sees a half-written dataset, and an unfinished writer removes its temporary files.
// Move-only; not thread-safe.
//
//   ASSIGN_OR_RETURN(PackedWriter w, PackedWriter::Create("/d/train.stkpack", classes, {}));
//   RETURN_IF_ERROR(w.Add(label, "cat/1.jpg", bytes));  ...
//   RETURN_IF_ERROR(w.Finish());
class PackedWriter {
 public:
  // `index_path`'s directory must exist. InvalidArgument for no classes or bad options.
  static absl::StatusOr<PackedWriter> Create(const std::string& index_path,
                                             std::vector<std::string> class_names,
                                             const PackOptions& options);
  PackedWriter(PackedWriter&&) noexcept;
  PackedWriter& operator=(PackedWriter&&) noexcept;
  ~PackedWriter();

  // Appends one sample. InvalidArgument for a label out of range or an image over 4 GiB.
  absl::Status Add(int32_t label, absl::string_view name, absl::Span<const uint8_t> bytes);

  // Writes the index and renames every file into place. FailedPrecondition without
  // samples or after Finish().
  absl::Status Finish();

  int64_t sample_count() const;
  int32_t shard_count() const;

 private:
  struct State;
  explicit PackedWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

struct PackStats {
  int64_t samples = 0;
  int32_t shards = 0;
  uint64_t image_bytes = 0;
  int64_t not_images = 0;     // samples whose bytes are not JPEG or PNG (unusable when served)
  int64_t shrunk = 0;         // stored shrunk and re-encoded (PackOptions::max_short_side)
  uint64_t source_bytes = 0;  // the files' own sizes (image_bytes is what was stored)
};

// Packs the ImageFolder at `root` into `index_path` (shards beside it) in
// ImageFolderDataset's order. Every file is copied byte for byte (or shrunk, see
// PackOptions::max_short_side), corrupt ones too (they are unusable samples when served,
// as in the folder); a file that cannot be read stops the packing with an error naming
// it. InvalidArgument for a negative max_short_side or a quality outside 1..100. `progress`, if
// set, is called after each sample.
absl::StatusOr<PackStats> PackImageFolder(
    const std::string& root, const std::string& index_path, const PackOptions& options,
    const std::function<void(int64_t done, int64_t total)>& progress = nullptr);

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_PACKED_WRITER_H_
