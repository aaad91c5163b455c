#include "data_service/dataset/image_folder_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data_service/dataset/encoded_image.h"

namespace stoker::data_service {
namespace {

namespace fs = std::filesystem;

constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};

// Note [File names in messages]
// A file name is bytes chosen by whoever wrote the dataset: a newline in one could forge a
// log line, and bytes that are not UTF-8 garble the reader's terminal. Every name this
// file puts into a message or log line goes through EscapeForLog (common/logging.h);
// files are still opened by their raw bytes.

// Up to five names, quoted (escaped), and how many more.
std::string Some(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 5; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ", ", "\"", EscapeForLog(names[i]), "\"");
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
  bool operator<(const DirectoryId& o) const {
    return device != o.device ? device < o.device : inode < o.inode;
  }
};

// Note [Bounded scan]
// Listing is the one pass over the dataset that the service makes before it serves, and
// the tree is whoever's: so it is bounded. (1) A folder reached a second time within a
// class (two symlinks to one folder, a farm of links) is listed once, by (device, inode),
// and the links that led to it again are named in a warning; without that, n links per
// level list 2^n copies of the same files. (2) The scan checks its deadline
// (ImageFolderOptions::scan_timeout, --scan_timeout_s) at every entry and fails with
// DeadlineExceeded naming the folder and how far it got. (3) A symlink whose target is
// outside the dataset root is followed and named in a warning, or refused by name with
// follow_links_outside_root = false (--follow_links=no).

// What one Open() carries through the walk (Note [Bounded scan]).
struct Scan {
  ImageFolderOptions options;
  std::string root;       // as given
  std::string root_real;  // its canonical path
  absl::Time deadline;
  int64_t entries = 0;
  std::set<DirectoryId> visited;           // the current class's folders
  std::vector<std::string> outside_links;  // "link -> target"
  std::vector<std::string> revisits;       // links to a folder already listed

  // DeadlineExceeded once the deadline has passed.
  absl::Status CheckDeadline(const fs::path& at) {
    ++entries;
    if (absl::Now() < deadline) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(
        "listing the image folder ", EscapeForLog(root), " took longer than --scan_timeout_s=",
        absl::ToInt64Seconds(options.scan_timeout), " (", entries, " entries so far, at ",
        EscapeForLog(at.string()), "): a hung or very slow file system?"));
  }

  // For an entry that is a symlink: notes (or refuses) a target outside the root.
  absl::Status CheckLink(const fs::path& link) {
    std::error_code error;
    const fs::path target = fs::canonical(link, error);
    if (error) return absl::OkStatus();  // dangling or looping: a bad sample when loaded
    const std::string resolved = target.string();
    if (resolved == root_real || absl::StartsWith(resolved, absl::StrCat(root_real, "/"))) {
      return absl::OkStatus();
    }
    std::string named = absl::StrCat(link.string(), " -> ", resolved);
    if (!options.follow_links_outside_root) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the symlink ", EscapeForLog(named), " leaves the image folder ", EscapeForLog(root),
          " (--follow_links=no; move the files into the folder, or allow it with "
          "--follow_links=yes)"));
    }
    outside_links.push_back(std::move(named));
    return absl::OkStatus();
  }
};

// Note [Symlink loops]
// Like torchvision (os.walk(followlinks=True)), listing follows symlinks to directories.
// A symlink that leads back to a directory it is inside would make that walk endless (or
// end in ELOOP or a too-long path after thousands of copies of the same files), so the
// walk keeps the chain of directories it is in and refuses such a link by name at start.
// A symlink to a directory elsewhere is followed (its files are listed under the link's
// path, as torchvision does). A file symlink that loops (a.jpg -> a.jpg) or dangles is
// listed and becomes a bad sample when loaded (ELOOP, ENOENT), like any unreadable file.
absl::Status WalkClass(const fs::path& directory,
                       std::vector<std::pair<DirectoryId, std::string>>* chain,
                       std::vector<std::pair<std::string, std::string>>* found, Scan* scan) {
  std::vector<std::pair<fs::path, bool>> entries;  // (path, is a directory)
  std::error_code error;
  fs::directory_iterator it(directory, error);
  if (error) return FilesystemError(error, absl::StrCat("list ", EscapeForLog(directory.string())));
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) break;
    std::error_code status_error;
    entries.emplace_back(it->path(), it->is_directory(status_error));  // follows symlinks
  }
  if (error) return FilesystemError(error, absl::StrCat("list ", EscapeForLog(directory.string())));
  // In name order, so that of two links to one folder the same one is listed everywhere.
  std::sort(entries.begin(), entries.end());
  for (const auto& [path, is_directory] : entries) {
    RETURN_IF_ERROR(scan->CheckDeadline(path));
    std::error_code link_error;
    if (fs::is_symlink(fs::symlink_status(path, link_error))) {
      RETURN_IF_ERROR(scan->CheckLink(path));
    }
    if (!is_directory) {
      const std::string name = path.filename().string();
      if (HasImageExtension(name)) found->emplace_back(path.parent_path().string(), name);
      continue;
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return FilesystemError(std::error_code(errno, std::generic_category()),
                             absl::StrCat("stat ", EscapeForLog(path.string())));
    }
    const DirectoryId id{st.st_dev, st.st_ino};
    for (const auto& [ancestor, ancestor_path] : *chain) {
      if (ancestor == id) {
        std::error_code link_error;
        const fs::path target = fs::read_symlink(path, link_error);
        return absl::InvalidArgumentError(
            absl::StrCat("symlink loop in the image folder: ", EscapeForLog(path.string()),
                         link_error ? "" : absl::StrCat(" -> ", EscapeForLog(target.string())),
                         " leads back to ", EscapeForLog(ancestor_path),
                         ", which contains it (remove the link or point it elsewhere)"));
      }
    }
    if (!scan->visited.insert(id).second) {  // Note [Bounded scan]
      scan->revisits.push_back(path.string());
      continue;
    }
    chain->emplace_back(id, path.string());
    absl::Status walked = WalkClass(path, chain, found, scan);
    chain->pop_back();
    if (!walked.ok()) return walked;
  }
  return absl::OkStatus();
}

// One class folder's image files, sorted as torchvision's
// `for root, _, names in sorted(os.walk(dir, followlinks=True)): for name in sorted(names)`.
absl::Status ListClass(const std::string& root, const fs::path& class_dir, int32_t label,
                       std::vector<ImageFolderSample>* samples, Scan* scan) {
  std::vector<std::pair<std::string, std::string>> found;  // (directory, file name)
  // The root and the class folder: a link back to either is a loop.
  std::vector<std::pair<DirectoryId, std::string>> chain;
  for (const std::string& directory : {root, class_dir.string()}) {
    struct stat st;
    if (::stat(directory.c_str(), &st) != 0) {
      return FilesystemError(std::error_code(errno, std::generic_category()),
                             absl::StrCat("stat ", EscapeForLog(directory)));
    }
    chain.emplace_back(DirectoryId{st.st_dev, st.st_ino}, directory);
  }
  scan->visited.clear();
  scan->visited.insert(chain.back().first);
  if (absl::Status s = WalkClass(class_dir, &chain, &found, scan); !s.ok()) return s;
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
    const std::string& root, const ImageFolderOptions& options) {
  std::error_code error;
  const fs::file_status status = fs::status(root, error);
  if (!fs::exists(status)) {
    return absl::NotFoundError(
        absl::StrCat("image folder ", EscapeForLog(root), " does not exist"));
  }
  if (!fs::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("image folder ", EscapeForLog(root), " is not a directory"));
  }
  Scan scan;
  scan.options = options;
  scan.root = root;
  scan.root_real = fs::canonical(root, error).string();
  if (error) {
    return FilesystemError(error, absl::StrCat("resolve image folder ", EscapeForLog(root)));
  }
  scan.deadline = absl::Now() + options.scan_timeout;
  std::vector<std::string> classes;
  std::vector<std::string> ignored;  // Note [Files beside the class folders]
  fs::directory_iterator it(root, error);
  if (error) return FilesystemError(error, absl::StrCat("list image folder ", EscapeForLog(root)));
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) break;
    RETURN_IF_ERROR(scan.CheckDeadline(it->path()));
    std::error_code status_error;
    if (it->is_symlink(status_error)) RETURN_IF_ERROR(scan.CheckLink(it->path()));
    if (it->is_directory(status_error)) {
      classes.push_back(it->path().filename().string());
    } else {
      ignored.push_back(it->path().filename().string());
    }
  }
  if (error) return FilesystemError(error, absl::StrCat("list image folder ", EscapeForLog(root)));
  std::sort(ignored.begin(), ignored.end());
  if (classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder ", EscapeForLog(root), " has no class sub-folders (expected ",
        EscapeForLog(root), "/<class>/<image>)",
        ignored.empty() ? "; it is empty"
                        : absl::StrCat("; it holds only ", ignored.size(),
                                       " file(s), which are not classes: ", Some(ignored))));
  }
  if (!ignored.empty()) {
    LogWarning(
        "image folder %s: %d entr%s beside the class folders %s not a directory and "
        "%s not a class (as in torchvision): %s",
        EscapeForLog(root), ignored.size(), ignored.size() == 1 ? "y" : "ies",
        ignored.size() == 1 ? "is" : "are", ignored.size() == 1 ? "is" : "are", Some(ignored));
  }
  std::sort(classes.begin(), classes.end());
  std::vector<ImageFolderSample> samples;
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes.size(); ++label) {
    const size_t before = samples.size();
    if (absl::Status s = ListClass(root, fs::path(root) / classes[label],
                                   static_cast<int32_t>(label), &samples, &scan);
        !s.ok()) {
      return s;
    }
    if (samples.size() == before) empty_classes.push_back(classes[label]);
  }
  if (!empty_classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image folder ", EscapeForLog(root), ": no image file for the classes ",
        EscapeForLog(absl::StrJoin(empty_classes, ", ")), " (supported extensions: ",
        absl::StrJoin(std::begin(kImageExtensions), std::end(kImageExtensions), " "), ")"));
  }
  if (!scan.outside_links.empty()) {
    LogWarning(
        "image folder %s: %d symlink(s) lead outside it and are followed "
        "(--follow_links=no refuses them): %s",
        EscapeForLog(root), scan.outside_links.size(), Some(scan.outside_links));
  }
  if (!scan.revisits.empty()) {
    LogWarning(
        "image folder %s: %d symlink(s) lead to a folder of the same class that was "
        "already listed; its files are listed once: %s",
        EscapeForLog(root), scan.revisits.size(), Some(scan.revisits));
  }
  auto dataset = std::unique_ptr<ImageFolderDataset>(
      new ImageFolderDataset(root, std::move(classes), std::move(samples), std::move(ignored)));
  dataset->outside_links_ = std::move(scan.outside_links);
  dataset->revisited_links_ = std::move(scan.revisits);
  return dataset;
}

absl::Status ImageFolderDataset::CheckStillThere(int32_t label) const {
  // Note [A dataset that vanishes].
  struct stat st;
  const bool listable = ::stat(root_.c_str(), &st) == 0;
  if (!listable || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the image folder ", EscapeForLog(root_), " is gone (",
        listable ? "not a directory" : std::strerror(errno), "); it was listed at start with ",
        samples_.size(), " samples: was it deleted, moved or unmounted during the run?"));
  }
  const std::string class_dir = absl::StrCat(root_, "/", classes()[label]);
  if (::stat(class_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the class folder ", EscapeForLog(class_dir),
                     " of the image folder is gone; it was listed at start: "
                     "was the dataset deleted, moved or unmounted during the run?"));
  }
  return absl::OkStatus();
}

std::string ImageFolderDataset::Describe(int64_t index) const {
  // Note [File names in messages].
  if (index < 0 || index >= size()) {
    return absl::StrCat("sample ", index, " of ", EscapeForLog(root_));
  }
  return absl::StrCat("sample ", index, " (", EscapeForLog(samples_[index].path), ")");
}

absl::StatusOr<absl::Span<const uint8_t>> ImageFolderDataset::ReadEncoded(
    int64_t index, SampleScratch& scratch) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(absl::StrCat("sample ", index, " is outside 0..", size() - 1,
                                              " of image folder ", EscapeForLog(root_)));
  }
  absl::StatusOr<absl::Span<const uint8_t>> bytes =
      ReadImageFile(samples_[index].path, &scratch.file_bytes);
  if (!bytes.ok()) {
    if (absl::Status gone = CheckStillThere(samples_[index].label); !gone.ok()) return gone;
  }
  return bytes;
}

}  // namespace stoker::data_service
