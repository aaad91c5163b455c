#include "data_service/dataset/packed_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "data_service/dataset/encoded_image.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the packed format is little-endian and read as in memory");

namespace stoker::data_service {
namespace {

// Index files larger than this are refused (a billion samples stays well below it).
constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 30;

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("packed index ", path, ": ", what, " (not a packed dataset of version ",
                   kPackedVersion, ", or damaged: pack it again with pack_imagefolder)"));
}

absl::Status ReadExactly(int fd, void* data, size_t bytes, uint64_t offset,
                         const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("read ", path));
    }
    if (got == 0) return absl::DataLossError(absl::StrCat(path, " ended early"));
    p += got;
    bytes -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Whether [offset, offset + count * size) lies in [0, limit).
bool SectionFits(uint64_t offset, uint64_t count, uint64_t size, uint64_t limit) {
  if (offset > limit) return false;
  if (count > (limit - offset) / size) return false;
  return true;
}

}  // namespace

absl::string_view PackedDataset::SampleName(int64_t index) const {
  const uint32_t offset = samples_[index].name;
  uint32_t length = 0;
  std::memcpy(&length, strings_.data() + offset, sizeof(length));
  return absl::string_view(strings_.data() + offset + sizeof(length), length);
}

namespace {

// The index's header, checked against the file it came from: magic, version, sizes, and
// every section inside the file.
absl::StatusOr<PackedIndexHeader> ReadIndexHeader(int fd, const std::string& index_path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat ", index_path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed index ", index_path,
                     " is not a regular file (a packed dataset is named by "
                     "its index file, e.g. train.stkpack)"));
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  PackedIndexHeader header;
  if (file_bytes < sizeof(header)) return Corrupt(index_path, "shorter than its header");
  if (file_bytes > kMaxIndexBytes) return Corrupt(index_path, "larger than 64 GiB");
  if (absl::Status s = ReadExactly(fd, &header, sizeof(header), 0, index_path); !s.ok()) {
    return s;
  }
  if (std::memcmp(header.magic, kPackedIndexMagic, sizeof(header.magic)) != 0) {
    return Corrupt(index_path, "bad magic");
  }
  if (header.version != kPackedVersion) {
    return Corrupt(index_path, absl::StrCat("format version ", header.version));
  }
  if (header.header_bytes != sizeof(header)) return Corrupt(index_path, "bad header size");
  if (header.file_bytes != file_bytes) {
    return Corrupt(index_path, absl::StrCat("the file is ", file_bytes,
                                            " bytes but its header "
                                            "says ",
                                            header.file_bytes, " (truncated?)"));
  }
  if (header.sample_count < 1 || header.class_count < 1 || header.shard_count < 1) {
    return Corrupt(index_path,
                   absl::StrCat("it has ", header.sample_count, " samples, ", header.class_count,
                                " classes, ", header.shard_count, " shards"));
  }
  const uint64_t samples = static_cast<uint64_t>(header.sample_count);
  const uint64_t shards = static_cast<uint64_t>(header.shard_count);
  if (!SectionFits(header.samples_offset, samples, sizeof(PackedSample), file_bytes) ||
      !SectionFits(header.shards_offset, shards, sizeof(PackedShard), file_bytes) ||
      header.strings_offset > file_bytes ||
      file_bytes - header.strings_offset > std::numeric_limits<uint32_t>::max()) {
    return Corrupt(index_path, "a section lies outside the file");
  }
  return header;
}

// The string at `offset` of the index's string table (a uint32 length, then the bytes),
// refused unless the whole string lies inside the table.
absl::StatusOr<absl::string_view> StringAt(const std::string& strings, uint32_t offset,
                                           const std::string& index_path) {
  uint32_t length = 0;
  if (offset > strings.size() || strings.size() - offset < sizeof(length)) {
    return Corrupt(index_path, absl::StrCat("string offset ", offset, " out of bounds"));
  }
  std::memcpy(&length, strings.data() + offset, sizeof(length));
  if (length > strings.size() - offset - sizeof(length)) {
    return Corrupt(index_path, absl::StrCat("string at ", offset, " runs past the table"));
  }
  return absl::string_view(strings.data() + offset + sizeof(length), length);
}

// Opens shard `k` at `path` and checks it against its index entry: a regular file of the
// recorded size whose header names it shard `k` of this version.
absl::StatusOr<UniqueFd> OpenShard(const std::string& path, uint64_t k, const PackedShard& entry,
                                   const std::string& index_path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("shard ", path, " of packed index ", index_path, " does not exist"));
    }
    return ErrnoToStatus(errno, absl::StrCat("open shard ", path));
  }
  struct stat shard_stat;
  if (fstat(fd.get(), &shard_stat) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  if (!S_ISREG(shard_stat.st_mode) || static_cast<uint64_t>(shard_stat.st_size) != entry.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", path, " is ", shard_stat.st_size, " bytes but packed index ", index_path,
        " expects ", entry.bytes, " (truncated, or from another packing: pack again)"));
  }
  PackedShardHeader shard_header;
  if (entry.bytes < sizeof(shard_header)) {
    return Corrupt(index_path, absl::StrCat("shard ", path, " is shorter than its header"));
  }
  if (absl::Status s = ReadExactly(fd.get(), &shard_header, sizeof(shard_header), 0, path);
      !s.ok()) {
    return s;
  }
  if (std::memcmp(shard_header.magic, kPackedShardMagic, sizeof(shard_header.magic)) != 0 ||
      shard_header.version != kPackedVersion || shard_header.shard != k) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not shard ", k, " of a version ",
                                                   kPackedVersion, " packed dataset (bad header)"));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PackedDataset>> PackedDataset::Open(const std::string& index_path) {
  UniqueFd fd(open(index_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("packed index ", index_path, " does not exist"));
    }
    return ErrnoToStatus(errno, absl::StrCat("open packed index ", index_path));
  }
  absl::StatusOr<PackedIndexHeader> read_header = ReadIndexHeader(fd.get(), index_path);
  if (!read_header.ok()) return read_header.status();
  const PackedIndexHeader& header = *read_header;
  const uint64_t samples = static_cast<uint64_t>(header.sample_count);
  const uint64_t shards = static_cast<uint64_t>(header.shard_count);

  auto dataset = std::unique_ptr<PackedDataset>(new PackedDataset());
  dataset->index_path_ = index_path;
  dataset->samples_.resize(samples);
  std::vector<PackedShard> shard_entries(shards);
  dataset->strings_.resize(header.file_bytes - header.strings_offset);
  for (const auto& [data, bytes, offset] :
       {std::tuple<void*, size_t, uint64_t>{dataset->samples_.data(),
                                            samples * sizeof(PackedSample), header.samples_offset},
        {shard_entries.data(), shards * sizeof(PackedShard), header.shards_offset},
        {dataset->strings_.data(), dataset->strings_.size(), header.strings_offset}}) {
    if (absl::Status s = ReadExactly(fd.get(), data, bytes, offset, index_path); !s.ok()) {
      return s;
    }
  }
  fd.Reset();
  const std::string& strings = dataset->strings_;

  // Classes: the first class_count strings of the table, in order.
  std::vector<std::string> classes;
  uint32_t offset = 0;
  for (int32_t c = 0; c < header.class_count; ++c) {
    absl::StatusOr<absl::string_view> name = StringAt(strings, offset, index_path);
    if (!name.ok()) return name.status();
    classes.emplace_back(*name);
    offset += static_cast<uint32_t>(sizeof(uint32_t) + name->size());
  }
  dataset->set_classes(std::move(classes));

  // Shards: plain file names beside the index, each the size the index records.
  const std::filesystem::path directory = std::filesystem::path(index_path).parent_path();
  for (uint64_t k = 0; k < shards; ++k) {
    absl::StatusOr<absl::string_view> name = StringAt(strings, shard_entries[k].name, index_path);
    if (!name.ok()) return name.status();
    if (name->empty() || absl::StrContains(*name, '/') || *name == "." || *name == "..") {
      return Corrupt(index_path,
                     absl::StrCat("shard ", k, " has the bad file name \"", *name, "\""));
    }
    Shard shard;
    shard.path = (directory / std::string(*name)).string();
    absl::StatusOr<UniqueFd> shard_fd = OpenShard(shard.path, k, shard_entries[k], index_path);
    if (!shard_fd.ok()) return shard_fd.status();
    shard.fd = std::move(*shard_fd);
    dataset->shards_.push_back(std::move(shard));
  }

  // Samples: labels, shards and byte ranges in range.
  for (uint64_t i = 0; i < samples; ++i) {
    const PackedSample& sample = dataset->samples_[i];
    if (sample.label < 0 || sample.label >= header.class_count) {
      return Corrupt(index_path, absl::StrCat("sample ", i, " has label ", sample.label, " of ",
                                              header.class_count, " classes"));
    }
    if (sample.shard >= shards) {
      return Corrupt(index_path,
                     absl::StrCat("sample ", i, " is in shard ", sample.shard, " of ", shards));
    }
    const uint64_t shard_bytes = shard_entries[sample.shard].bytes;
    if (sample.offset < sizeof(PackedShardHeader) || sample.offset > shard_bytes ||
        sample.length > shard_bytes - sample.offset) {
      return Corrupt(index_path, absl::StrCat("sample ", i, " lies outside its shard"));
    }
    if (absl::StatusOr<absl::string_view> name = StringAt(strings, sample.name, index_path);
        !name.ok()) {
      return name.status();
    }
  }
  return dataset;
}

std::string PackedDataset::Describe(int64_t index) const {
  // Names are the packer's bytes: escaped as in Note [File names in messages]
  // (image_folder_dataset.cc).
  if (index < 0 || index >= size()) {
    return absl::StrCat("sample ", index, " of ", EscapeForLog(index_path_));
  }
  const PackedSample& sample = samples_[index];
  return absl::StrCat("sample ", index, " (", EscapeForLog(SampleName(index)), " in ",
                      EscapeForLog(shards_[sample.shard].path), " at byte ", sample.offset, ")");
}

absl::StatusOr<absl::Span<const uint8_t>> PackedDataset::ReadEncoded(int64_t index,
                                                                     SampleScratch& scratch) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(absl::StrCat("sample ", index, " is outside 0..", size() - 1,
                                              " of packed dataset ", index_path_));
  }
  const PackedSample& sample = samples_[index];
  return ReadFileRange(shards_[sample.shard].fd.get(), sample.offset, sample.length,
                       &scratch.file_bytes);
}

}  // namespace stoker::data_service
