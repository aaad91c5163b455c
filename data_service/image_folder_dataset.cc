#include "data_service/image_folder_dataset.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data_service/encoded_image.h"

namespace stoker::data_service {
namespace {

namespace fs = std::filesystem;

constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};

absl::Status FilesystemError(const std::error_code& error, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", error.message()));
}

// One class folder's image files, sorted as torchvision's
// `for root, _, names in sorted(os.walk(dir, followlinks=True)): for name in sorted(names)`.
absl::Status ListClass(const fs::path& class_dir, int32_t label,
                       std::vector<ImageFolderSample>* samples) {
  std::vector<std::pair<std::string, std::string>> found;  // (directory, file name)
  std::error_code error;
  fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink,
                                      error);
  if (error) return FilesystemError(error, absl::StrCat("list ", class_dir.string()));
  for (; it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (error) break;
    std::error_code status_error;
    if (it->is_directory(status_error)) continue;  // follows symlinks, as os.walk does
    const std::string name = it->path().filename().string();
    if (HasImageExtension(name)) found.emplace_back(it->path().parent_path().string(), name);
  }
  if (error) return FilesystemError(error, absl::StrCat("list ", class_dir.string()));
  std::sort(found.begin(), found.end());
  for (auto& [directory, name] : found) {
    samples->push_back(ImageFolderSample{(fs::path(directory) / name).string(), label});
  }
  return absl::OkStatus();
}

}  // namespace

bool HasImageExtension(absl::string_view file_name) {
  const std::string lower = absl::AsciiStrToLower(file_name);
  for (const char* extension : kImageExtensions) {
    if (absl::EndsWith(lower, extension)) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<ImageFolderDataset>> ImageFolderDataset::Open(
    const std::string& root) {
  std::error_code error;
  const fs::file_status status = fs::status(root, error);
  if (!fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat("image folder ", root, " does not exist"));
  }
  if (!fs::is_directory(status)) {
    return absl::InvalidArgumentError(absl::StrCat("image folder ", root, " is not a directory"));
  }
  std::vector<std::string> classes;
  fs::directory_iterator it(root, error);
  if (error) return FilesystemError(error, absl::StrCat("list image folder ", root));
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) break;
    std::error_code status_error;
    if (it->is_directory(status_error)) classes.push_back(it->path().filename().string());
  }
  if (error) return FilesystemError(error, absl::StrCat("list image folder ", root));
  if (classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder ", root, " has no class sub-folders (expected ", root, "/<class>/<image>)"));
  }
  std::sort(classes.begin(), classes.end());
  std::vector<ImageFolderSample> samples;
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes.size(); ++label) {
    const size_t before = samples.size();
    if (absl::Status s = ListClass(fs::path(root) / classes[label], static_cast<int32_t>(label),
                                   &samples);
        !s.ok()) {
      return s;
    }
    if (samples.size() == before) empty_classes.push_back(classes[label]);
  }
  if (!empty_classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder ", root, ": no image file for the classes ",
        absl::StrJoin(empty_classes, ", "), " (supported extensions: ",
        absl::StrJoin(std::begin(kImageExtensions), std::end(kImageExtensions), " "), ")"));
  }
  return std::unique_ptr<ImageFolderDataset>(
      new ImageFolderDataset(root, std::move(classes), std::move(samples)));
}

std::string ImageFolderDataset::Describe(int64_t index) const {
  if (index < 0 || index >= size()) return absl::StrCat("sample ", index, " of ", root_);
  return absl::StrCat("sample ", index, " (", samples_[index].path, ")");
}

absl::Status ImageFolderDataset::Load(int64_t index, const SampleOptions& options,
                                      SampleScratch& scratch, uint8_t* dst) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", index, " is outside 0..", size() - 1, " of image folder ", root_));
  }
  absl::StatusOr<absl::Span<const uint8_t>> bytes =
      ReadImageFile(samples_[index].path, &scratch.file_bytes);
  if (!bytes.ok()) return bytes.status();
  return DecodeSample(*bytes, index, options, scratch, dst);
}

}  // namespace stoker::data_service
