// ImageFolderDataset: torchvision.datasets.ImageFolder's layout and ordering. Each
// sub-folder of the root is a class (labels follow the sorted folder names); its image
// files, found recursively and sorted, are that class's samples. A sample is loaded by
// reading its file into the worker's scratch buffer and decoding it (encoded_image.h).
#ifndef STOKER_DATA_SERVICE_IMAGE_FOLDER_DATASET_H_
#define STOKER_DATA_SERVICE_IMAGE_FOLDER_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data_service/dataset.h"

namespace stoker::data_service {

// torchvision's IMG_EXTENSIONS, compared case-insensitively.
bool HasImageExtension(absl::string_view file_name);

struct ImageFolderSample {
  std::string path;
  int32_t label = 0;
};

// The listed folder; images are read and decoded on Load(). Immutable; thread-safe.
class ImageFolderDataset : public Dataset {
 public:
  // Lists `root` as torchvision does: classes are the sub-directories (following
  // symlinks) sorted by name; a class's samples are the files with an image extension
  // under it, recursively, sorted by (directory, file name). NotFound if `root` does not
  // exist; InvalidArgument if it is not a directory, has no class folders, or a class
  // folder has no image (the message names the class).
  static absl::StatusOr<std::unique_ptr<ImageFolderDataset>> Open(const std::string& root);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int32_t num_classes() const override { return static_cast<int32_t>(classes_.size()); }
  int32_t Label(int64_t index) const override { return samples_[index].label; }
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const override;
  std::string Describe(int64_t index) const override;

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<ImageFolderSample>& samples() const { return samples_; }

 private:
  ImageFolderDataset(std::string root, std::vector<std::string> classes,
                     std::vector<ImageFolderSample> samples)
      : root_(std::move(root)), classes_(std::move(classes)), samples_(std::move(samples)) {}

  std::string root_;
  std::vector<std::string> classes_;
  std::vector<ImageFolderSample> samples_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_IMAGE_FOLDER_DATASET_H_
