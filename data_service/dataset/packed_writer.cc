#include "data_service/dataset/packed_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "data_service/dataset/encoded_image.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/image/decode.h"
#include "data_service/image/shrink.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the packed format is little-endian and written as in memory");

namespace stoker::data_service {
namespace {

constexpr char kPartialSuffix[] = ".partial";

absl::Status WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t wrote = write(fd, p, bytes);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("write ", path));
    }
    p += wrote;
    bytes -= static_cast<size_t>(wrote);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> CreateFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("create ", path));
  return fd;
}

absl::Status SyncAndClose(UniqueFd fd, const std::string& path) {
  if (fsync(fd.get()) != 0) return ErrnoToStatus(errno, absl::StrCat("fsync ", path));
  if (close(fd.Release()) != 0) return ErrnoToStatus(errno, absl::StrCat("close ", path));
  return absl::OkStatus();
}

}  // namespace

std::string PackedShardFileName(absl::string_view index_file_name, int32_t shard) {
  return absl::StrFormat("%s-%05d.shard", index_file_name, shard);
}

struct PackedWriter::State {
  std::string index_path;
  std::string directory;
  std::string index_file_name;
  PackOptions options;
  int32_t class_count = 0;
  std::vector<PackedSample> samples;
  std::vector<PackedShard> shards;
  std::vector<std::string> shard_paths;  // final paths
  std::string strings;
  UniqueFd shard_fd;  // the shard being written
  uint64_t shard_size = 0;
  bool finished = false;

  ~State() {
    if (finished) return;
    shard_fd.Reset();
    for (const std::string& path : shard_paths) unlink((path + kPartialSuffix).c_str());
    unlink((index_path + kPartialSuffix).c_str());
  }

  absl::StatusOr<uint32_t> AddString(absl::string_view text) {
    const uint64_t offset = strings.size();
    if (offset + 4 + text.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::ResourceExhaustedError(
          "the packed index's string table would pass 4 GiB (too many or too long names)");
    }
    const uint32_t length = static_cast<uint32_t>(text.size());
    strings.append(reinterpret_cast<const char*>(&length), sizeof(length));
    strings.append(text.data(), text.size());
    return static_cast<uint32_t>(offset);
  }

  absl::Status CloseShard() {
    if (!shard_fd.valid()) return absl::OkStatus();
    shards.back().bytes = shard_size;
    return SyncAndClose(std::move(shard_fd), shard_paths.back() + kPartialSuffix);
  }

  absl::Status OpenShard() {
    if (shards.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::ResourceExhaustedError("too many shards");
    }
    const int32_t number = static_cast<int32_t>(shards.size());
    const std::string name = PackedShardFileName(index_file_name, number);
    const std::string path = (std::filesystem::path(directory) / name).string();
    absl::StatusOr<uint32_t> name_offset = AddString(name);
    if (!name_offset.ok()) return name_offset.status();
    shard_paths.push_back(path);
    shards.push_back(PackedShard{0, *name_offset, 0});
    absl::StatusOr<UniqueFd> fd = CreateFile(path + kPartialSuffix);
    if (!fd.ok()) return fd.status();
    shard_fd = std::move(*fd);
    PackedShardHeader header;
    std::memcpy(header.magic, kPackedShardMagic, sizeof(header.magic));
    header.version = kPackedVersion;
    header.shard = static_cast<uint32_t>(number);
    shard_size = sizeof(header);
    return WriteAll(shard_fd.get(), &header, sizeof(header), path + kPartialSuffix);
  }
};

PackedWriter::PackedWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
PackedWriter::PackedWriter(PackedWriter&&) noexcept = default;
PackedWriter& PackedWriter::operator=(PackedWriter&&) noexcept = default;
PackedWriter::~PackedWriter() = default;

int64_t PackedWriter::sample_count() const { return static_cast<int64_t>(state_->samples.size()); }
int32_t PackedWriter::shard_count() const { return static_cast<int32_t>(state_->shards.size()); }

absl::StatusOr<PackedWriter> PackedWriter::Create(const std::string& index_path,
                                                  std::vector<std::string> class_names,
                                                  const PackOptions& options) {
  if (class_names.empty() ||
      class_names.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError("a packed dataset needs at least one class");
  }
  if (options.shard_bytes < sizeof(PackedShardHeader) + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_bytes: must be more than ", sizeof(PackedShardHeader)));
  }
  const std::filesystem::path path(index_path);
  if (!path.has_filename() || path.filename() == "." || path.filename() == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("packed index path ", index_path, " does not name a file"));
  }
  auto state = std::make_unique<State>();
  state->index_path = index_path;
  state->directory = path.has_parent_path() ? path.parent_path().string() : ".";
  state->index_file_name = path.filename().string();
  state->options = options;
  state->class_count = static_cast<int32_t>(class_names.size());
  for (const std::string& name : class_names) {
    absl::StatusOr<uint32_t> offset = state->AddString(name);
    if (!offset.ok()) return offset.status();
  }
  struct stat st;
  if (stat(state->directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the directory of the packed index ", index_path, " does not exist"));
  }
  return PackedWriter(std::move(state));
}

absl::Status PackedWriter::Add(int32_t label, absl::string_view name,
                               absl::Span<const uint8_t> bytes) {
  State& s = *state_;
  if (s.finished) return absl::FailedPreconditionError("PackedWriter::Add after Finish");
  if (label < 0 || label >= s.class_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("label ", label, " of ", name, " is outside 0..", s.class_count - 1));
  }
  if (bytes.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", bytes.size(), " bytes; packed samples are under 4 GiB"));
  }
  if (!s.shard_fd.valid() || (s.shard_size > sizeof(PackedShardHeader) &&
                              s.shard_size + bytes.size() > s.options.shard_bytes)) {
    if (absl::Status st = s.CloseShard(); !st.ok()) return st;
    if (absl::Status st = s.OpenShard(); !st.ok()) return st;
  }
  absl::StatusOr<uint32_t> name_offset = s.AddString(name);
  if (!name_offset.ok()) return name_offset.status();
  PackedSample sample;
  sample.offset = s.shard_size;
  sample.length = static_cast<uint32_t>(bytes.size());
  sample.shard = static_cast<uint32_t>(s.shards.size() - 1);
  sample.label = label;
  sample.name = *name_offset;
  if (absl::Status st = WriteAll(s.shard_fd.get(), bytes.data(), bytes.size(),
                                 s.shard_paths.back() + kPartialSuffix);
      !st.ok()) {
    return st;
  }
  s.shard_size += bytes.size();
  s.samples.push_back(sample);
  return absl::OkStatus();
}

absl::Status PackedWriter::Finish() {
  State& s = *state_;
  if (s.finished) return absl::FailedPreconditionError("PackedWriter::Finish called twice");
  if (s.samples.empty()) {
    return absl::FailedPreconditionError("a packed dataset needs at least one sample");
  }
  if (absl::Status st = s.CloseShard(); !st.ok()) return st;

  PackedIndexHeader header;
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kPackedIndexMagic, sizeof(header.magic));
  header.version = kPackedVersion;
  header.header_bytes = sizeof(header);
  header.sample_count = static_cast<int64_t>(s.samples.size());
  header.class_count = s.class_count;
  header.shard_count = static_cast<int32_t>(s.shards.size());
  header.samples_offset = sizeof(header);
  header.shards_offset = header.samples_offset + s.samples.size() * sizeof(PackedSample);
  header.strings_offset = header.shards_offset + s.shards.size() * sizeof(PackedShard);
  header.file_bytes = header.strings_offset + s.strings.size();

  const std::string partial = s.index_path + kPartialSuffix;
  absl::StatusOr<UniqueFd> fd = CreateFile(partial);
  if (!fd.ok()) return fd.status();
  for (const auto& [data, bytes] : {std::pair<const void*, size_t>{&header, sizeof(header)},
                                    {s.samples.data(), s.samples.size() * sizeof(PackedSample)},
                                    {s.shards.data(), s.shards.size() * sizeof(PackedShard)},
                                    {s.strings.data(), s.strings.size()}}) {
    if (absl::Status st = WriteAll(fd->get(), data, bytes, partial); !st.ok()) return st;
  }
  if (absl::Status st = SyncAndClose(std::move(*fd), partial); !st.ok()) return st;
  // Shards first, the index last: the index's appearance is the commit.
  for (const std::string& path : s.shard_paths) {
    if (rename((path + kPartialSuffix).c_str(), path.c_str()) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("rename ", path, kPartialSuffix, " to ", path));
    }
  }
  if (rename(partial.c_str(), s.index_path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename ", partial, " to ", s.index_path));
  }
  s.finished = true;
  UniqueFd directory(open(s.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory.valid()) fsync(directory.get());
  return absl::OkStatus();
}

absl::StatusOr<PackStats> PackImageFolder(
    const std::string& root, const std::string& index_path, const PackOptions& options,
    const std::function<void(int64_t done, int64_t total)>& progress) {
  if (options.max_short_side < 0 || options.jpeg_quality < 1 || options.jpeg_quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_short_side must be >= 0 and quality in 1..100, got ",
                     options.max_short_side, " and ", options.jpeg_quality));
  }
  absl::StatusOr<std::unique_ptr<ImageFolderDataset>> folder = ImageFolderDataset::Open(root);
  if (!folder.ok()) return folder.status();
  const ImageFolderDataset& dataset = **folder;
  absl::StatusOr<PackedWriter> writer =
      PackedWriter::Create(index_path, dataset.classes(), options);
  if (!writer.ok()) return writer.status();
  PackStats stats;
  std::vector<uint8_t> buffer;
  const std::filesystem::path base(root);
  for (const ImageFolderSample& sample : dataset.samples()) {
    absl::StatusOr<absl::Span<const uint8_t>> bytes = ReadImageFile(sample.path, &buffer);
    if (!bytes.ok()) {
      return absl::Status(bytes.status().code(),
                          absl::StrCat("cannot pack ", sample.path, ": ", bytes.status().message(),
                                       " (fix or remove the file, then pack again)"));
    }
    const bool is_image = image::DetectImageFormat(*bytes).ok();
    if (!is_image) ++stats.not_images;
    stats.source_bytes += bytes->size();
    absl::Span<const uint8_t> stored = *bytes;
    std::optional<std::vector<uint8_t>> shrunk;
    if (options.max_short_side > 0 && is_image) {
      // A file that does not decode is stored as it is: it stays an unusable sample.
      absl::StatusOr<std::optional<std::vector<uint8_t>>> small =
          image::ShrinkEncodedImage(*bytes, options.max_short_side, options.jpeg_quality);
      if (small.ok() && small->has_value()) {
        shrunk = std::move(**small);
        stored = *shrunk;
        ++stats.shrunk;
      } else if (!small.ok() && absl::IsResourceExhausted(small.status())) {
        return small.status();
      }
    }
    const std::string name = std::filesystem::path(sample.path).lexically_relative(base).string();
    if (absl::Status s = writer->Add(sample.label, name, stored); !s.ok()) return s;
    ++stats.samples;
    stats.image_bytes += stored.size();
    if (progress) progress(stats.samples, dataset.size());
  }
  if (absl::Status s = writer->Finish(); !s.ok()) return s;
  stats.shards = writer->shard_count();
  return stats;
}

}  // namespace stoker::data_service
