#include "data_service/dataset/image_folder_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "data_service/dataset/encoded_image.h"

namespace stoker::data_service {
namespace {

namespace fs = std::filesystem;

constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};

// Up to five names, quoted, and how many more.
std::string Some(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 5; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ", ", "\"", names[i], "\"");
  }
  if (names.size() > 5) absl::StrAppend(&text, " and ", names.size() - 5, " more");
  return text;
}

absl::Status FilesystemError(const std::error_code& error, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", error.message()));
}

// A directory's identity, to recognise one reached again through a symlink.
struct DirectoryId {
  dev_t device;
  ino_t inode;
  bool operator==(const DirectoryId& o) const { return device == o.device && inode == o.inode; }
};

// Note [Symlink loops]
// Like torchvision (os.walk(followlinks=True)), listing follows symlinks to directories.
// A symlink that leads back to a directory it is inside would make that walk endless (or
// end in ELOOP or a too-long path after thousands of copies of the same files), so the
// walk keeps the chain of directories it is in and refuses such a link by name at start.
// A symlink to a directory elsewhere is followed (its files are listed under the link's
// path, as torchvision does). A file symlink that loops (a.jpg -> a.jpg) or dangles is
// listed and becomes a bad sample when loaded (ELOOP, ENOENT), like any unreadable file.
absl::Status WalkClass(const fs::path& directory, std::vector<std::pair<DirectoryId, std::string>>* chain,
                       std::vector<std::pair<std::string, std::string>>* found) {
  std::vector<std::pair<fs::path, bool>> entries;  // (path, is a directory)
  std::error_code error;
  fs::directory_iterator it(directory, error);
  if (error) return FilesystemError(error, absl::StrCat("list ", directory.string()));
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) break;
    std::error_code status_error;
    entries.emplace_back(it->path(), it->is_directory(status_error));  // follows symlinks
  }
  if (error) return FilesystemError(error, absl::StrCat("list ", directory.string()));
  for (const auto& [path, is_directory] : entries) {
    if (!is_directory) {
      const std::string name = path.filename().string();
      if (HasImageExtension(name)) found->emplace_back(path.parent_path().string(), name);
      continue;
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return FilesystemError(std::error_code(errno, std::generic_category()),
                             absl::StrCat("stat ", path.string()));
    }
    const DirectoryId id{st.st_dev, st.st_ino};
    for (const auto& [ancestor, ancestor_path] : *chain) {
      if (ancestor == id) {
        std::error_code link_error;
        const fs::path target = fs::read_symlink(path, link_error);
        return absl::InvalidArgumentError(absl::StrCat(
            "symlink loop in the image folder: ", path.string(),
            link_error ? "" : absl::StrCat(" -> ", target.string()), " leads back to ",
            ancestor_path, ", which contains it (remove the link or point it elsewhere)"));
      }
    }
    chain->emplace_back(id, path.string());
    absl::Status walked = WalkClass(path, chain, found);
    chain->pop_back();
    if (!walked.ok()) return walked;
  }
  return absl::OkStatus();
}

// One class folder's image files, sorted as torchvision's
// `for root, _, names in sorted(os.walk(dir, followlinks=True)): for name in sorted(names)`.
absl::Status ListClass(const std::string& root, const fs::path& class_dir, int32_t label,
                       std::vector<ImageFolderSample>* samples) {
  std::vector<std::pair<std::string, std::string>> found;  // (directory, file name)
  // The root and the class folder: a link back to either is a loop.
  std::vector<std::pair<DirectoryId, std::string>> chain;
  for (const std::string& directory : {root, class_dir.string()}) {
    struct stat st;
    if (::stat(directory.c_str(), &st) != 0) {
      return FilesystemError(std::error_code(errno, std::generic_category()),
                             absl::StrCat("stat ", directory));
    }
    chain.emplace_back(DirectoryId{st.st_dev, st.st_ino}, directory);
  }
  if (absl::Status s = WalkClass(class_dir, &chain, &found); !s.ok()) return s;
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
  std::vector<std::string> ignored;  // Note [Files beside the class folders]
  fs::directory_iterator it(root, error);
  if (error) return FilesystemError(error, absl::StrCat("list image folder ", root));
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) break;
    std::error_code status_error;
    if (it->is_directory(status_error)) {
      classes.push_back(it->path().filename().string());
    } else {
      ignored.push_back(it->path().filename().string());
    }
  }
  if (error) return FilesystemError(error, absl::StrCat("list image folder ", root));
  std::sort(ignored.begin(), ignored.end());
  if (classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder ", root, " has no class sub-folders (expected ", root, "/<class>/<image>)",
        ignored.empty() ? "; it is empty"
                        : absl::StrCat("; it holds only ", ignored.size(),
                                       " file(s), which are not classes: ", Some(ignored))));
  }
  if (!ignored.empty()) {
    LogWarning("image folder %s: %d entr%s beside the class folders %s not a directory and "
               "%s not a class (as in torchvision): %s",
               root, ignored.size(), ignored.size() == 1 ? "y" : "ies",
               ignored.size() == 1 ? "is" : "are", ignored.size() == 1 ? "is" : "are",
               Some(ignored));
  }
  std::sort(classes.begin(), classes.end());
  std::vector<ImageFolderSample> samples;
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes.size(); ++label) {
    const size_t before = samples.size();
    if (absl::Status s = ListClass(root, fs::path(root) / classes[label], static_cast<int32_t>(label),
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
  return std::unique_ptr<ImageFolderDataset>(new ImageFolderDataset(
      root, std::move(classes), std::move(samples), std::move(ignored)));
}

absl::Status ImageFolderDataset::CheckStillThere(int32_t label) const {
  // Note [A dataset that vanishes].
  struct stat st;
  const bool listable = ::stat(root_.c_str(), &st) == 0;
  if (!listable || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the image folder ", root_, " is gone (", listable ? "not a directory" : std::strerror(errno),
        "); it was listed at start with ", samples_.size(),
        " samples: was it deleted, moved or unmounted during the run?"));
  }
  const std::string class_dir = absl::StrCat(root_, "/", classes_[label]);
  if (::stat(class_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the class folder ", class_dir, " of the image folder is gone; it was listed at start: "
        "was the dataset deleted, moved or unmounted during the run?"));
  }
  return absl::OkStatus();
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
  if (!bytes.ok()) {
    if (absl::Status gone = CheckStillThere(samples_[index].label); !gone.ok()) return gone;
    return bytes.status();
  }
  return DecodeSample(*bytes, index, options, scratch, dst);
}

}  // namespace stoker::data_service
