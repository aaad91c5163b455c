// ImageFolderDataset: torchvision.datasets.ImageFolder's layout and ordering. Each
// sub-folder of the root is a class (labels follow the sorted folder names); its image
// files, found recursively and sorted, are that class's samples. A sample is loaded by
// reading its file into the worker's scratch buffer and decoding it (encoded_image.h).
#ifndef STOKER_DATA_SERVICE_DATASET_IMAGE_FOLDER_DATASET_H_
#define STOKER_DATA_SERVICE_DATASET_IMAGE_FOLDER_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data_service/dataset/dataset.h"
#include "data_service/dataset/encoded_image.h"

namespace stoker::data_service {

// torchvision's IMG_EXTENSIONS, compared case-insensitively.
bool HasImageExtension(absl::string_view file_name);

struct ImageFolderSample {
  std::string path;
  int32_t label = 0;
};

// Note [Files beside the class folders]
// An entry of the root that is not a directory (a file, a dangling symlink, a file named
// like a class) is not a class, as in torchvision; Open() warns once, naming them, and
// ignored_entries() lists them. A root with nothing but such entries is an error.
//
// Note [A dataset that vanishes]
// Open() lists the folder once. If a file cannot be read later, Load() checks whether the
// root and the sample's class folder are still there: a single missing or unreadable
// file is a bad sample (bad_samples.h: skipped and counted, or fatal with
// --bad_files=fail), but a root or class folder that is gone (deleted, moved, unmounted
// mid-run) is FailedPrecondition, which is not a bad-sample error and always stops
// production with that message, whatever --bad_files says: skipping every sample of a
// dataset that is no longer there would only hide the cause.
//
// Names are bytes: file and folder names that are not UTF-8 are listed, sorted and
// loaded like any other; messages carry them escaped (Note [File names in messages]).

// How Open() lists a folder (Note [Bounded scan] in the .cc).
struct ImageFolderOptions {
  // Follow symlinks whose target is outside the root (with a warning naming them), or
  // refuse the folder naming the first (--follow_links=yes|no).
  bool follow_links_outside_root = true;
  // The scan fails with DeadlineExceeded past this (--scan_timeout_s).
  absl::Duration scan_timeout = absl::Minutes(10);
};

// The listed folder; images are read and decoded on Load(). Immutable; thread-safe.
class ImageFolderDataset : public EncodedImageDataset {
 public:
  // Lists `root` as torchvision does: classes are the sub-directories (following
  // symlinks) sorted by name; a class's samples are the files with an image extension
  // under it, recursively, sorted by (directory, file name). NotFound if `root` does not
  // exist; InvalidArgument if it is not a directory, has no class folders (the message
  // says whether it is empty), a class folder has no image (the message names the
  // class), a folder cannot be listed, or a symlink leads back to a folder that contains
  // it (Note [Symlink loops] in the .cc; the message names the link), or with
  // `options.follow_links_outside_root` false, a symlink leaves the root; DeadlineExceeded
  // past `options.scan_timeout`. A folder reached twice within a class is listed once
  // (Note [Bounded scan]).
  static absl::StatusOr<std::unique_ptr<ImageFolderDataset>> Open(
      const std::string& root, const ImageFolderOptions& options = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int32_t Label(int64_t index) const override { return samples_[index].label; }
  absl::StatusOr<absl::Span<const uint8_t>> ReadEncoded(int64_t index,
                                                        SampleScratch& scratch) const override;
  std::string Describe(int64_t index) const override;

  const std::string& root() const { return root_; }
  const std::vector<ImageFolderSample>& samples() const { return samples_; }
  // Entries of the root that are not class folders (sorted).
  const std::vector<std::string>& ignored_entries() const { return ignored_entries_; }
  // Symlinks followed out of the root ("link -> target"), and links to a folder of the same
  // class already listed (Note [Bounded scan]); both warned about by Open().
  const std::vector<std::string>& outside_links() const { return outside_links_; }
  const std::vector<std::string>& revisited_links() const { return revisited_links_; }

 private:
  ImageFolderDataset(std::string root, std::vector<std::string> classes,
                     std::vector<ImageFolderSample> samples, std::vector<std::string> ignored)
      : EncodedImageDataset(std::move(classes)),
        root_(std::move(root)),
        samples_(std::move(samples)),
        ignored_entries_(std::move(ignored)) {}
  // OK while the root and class `label`'s folder are directories; else FailedPrecondition.
  absl::Status CheckStillThere(int32_t label) const;

  std::string root_;
  std::vector<ImageFolderSample> samples_;
  std::vector<std::string> ignored_entries_;
  std::vector<std::string> outside_links_;
  std::vector<std::string> revisited_links_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_IMAGE_FOLDER_DATASET_H_
