#include "trainer/checkpoint/checkpoint_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/crc32c.h"
#include "common/errno_status.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'O', 'K', 'E', 'R', 'C', 'K'};
constexpr size_t kHeaderBytes = kCheckpointHeaderBytes;
constexpr size_t kEntryCountOffset = 24;
constexpr uint8_t kInt = 1, kDouble = 2, kString = 3, kTensor = 4;
constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".stoker";

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T Get(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

const char* KindName(uint8_t kind) {
  switch (kind) {
    case kInt:
      return "an integer";
    case kDouble:
      return "a double";
    case kString:
      return "a string";
    case kTensor:
      return "a tensor";
  }
  return "unknown";
}

// Writes the header into the first kHeaderBytes of `first`, the file's first part, for a
// payload of `payload` bytes with checksum `payload_crc` and `entries` entries.
void WriteHeader(uint32_t entries, uint64_t payload, uint32_t payload_crc, std::string& first) {
  std::string header;
  header.append(kMagic, sizeof(kMagic));
  Put<uint32_t>(header, kCheckpointFormatVersion);
  Put<uint32_t>(header, payload_crc);
  Put<uint64_t>(header, payload);
  Put<uint32_t>(header, entries);
  Put<uint32_t>(header, Crc32c(header));
  std::memcpy(first.data(), header.data(), kHeaderBytes);
}

// The header of a file that is all in `file`.
void WriteHeader(uint32_t entries, std::string& file) {
  const uint64_t payload = file.size() - kHeaderBytes;
  WriteHeader(entries, payload, Crc32cExtend(0, file.data() + kHeaderBytes, payload), file);
}

// Note [Checkpoint files in parallel]
// A checkpoint of many gigabytes is bound by one thread: the CRC-32C of every byte, then the
// copy of every byte into the page cache. So both run on several threads over runs of at
// most kRunBytes of the file: each thread checksums the runs it takes (the CRCs are
// combined in file order, Crc32cCombine), and after the header is written each thread
// writes the runs it takes at their offsets (pwrite) and asks the kernel to start writing
// them back (sync_file_range), so that the final fsync finds little left. The bytes, the
// header written before the payload, and every rule of the atomic write are the same as
// with one thread.
constexpr size_t kRunBytes = size_t{16} << 20;

// Runs `work(i)` for every i < n on up to `threads` threads (this one included), each
// taking the next i in order.
template <typename Work>
void ForEachInParallel(size_t n, int threads, const Work& work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) work(i);
  };
  std::vector<std::thread> others;
  const size_t extra = std::min<size_t>(n, static_cast<size_t>(std::max(threads, 1))) - (n > 0);
  for (size_t t = 0; t < extra; ++t) others.emplace_back(worker);
  worker();
  for (std::thread& other : others) other.join();
}

}  // namespace

int CheckpointWriteThreads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(cores, 1, 8));
}

std::vector<std::pair<absl::string_view, uint64_t>> SealedCheckpoint::Runs(size_t max_bytes) const {
  std::vector<std::pair<absl::string_view, uint64_t>> runs;
  uint64_t offset = 0;
  for (absl::string_view part : parts()) {
    while (!part.empty()) {
      const absl::string_view run = part.substr(0, max_bytes);
      runs.emplace_back(run, offset);
      offset += run.size();
      part.remove_prefix(run.size());
    }
  }
  return runs;
}

absl::Status WriteCheckpointAtomically(const std::string& path, const SealedCheckpoint& checkpoint,
                                       mode_t mode, int threads,
                                       const PartWrittenHook& after_part) {
  if (after_part != nullptr) return WriteFileAtomically(path, checkpoint.parts(), mode, after_part);
  // Note [Checkpoint files in parallel].
  const auto runs = checkpoint.Runs(kRunBytes);
  return WriteFileAtomicallyWith(path, mode, [&](int fd) {
    std::atomic<int> failed{0};
    ForEachInParallel(runs.size(), threads, [&](size_t i) {
      if (failed.load() != 0) return;
      const auto& [run, offset] = runs[i];
      if (int error = PwriteAll(fd, run, static_cast<off_t>(offset)); error != 0) {
        int none = 0;
        failed.compare_exchange_strong(none, error);
        return;
      }
      // Only a hint: the fsync after the fill is what makes the file durable.
      ::sync_file_range(fd, static_cast<off64_t>(offset), static_cast<off64_t>(run.size()),
                        SYNC_FILE_RANGE_WRITE);
    });
    return failed.load();
  });
}

std::string SealedCheckpointForTesting(std::string file) {
  if (file.size() < kHeaderBytes) return file;
  WriteHeader(Get<uint32_t>(file, kEntryCountOffset), file);
  return file;
}

CheckpointWriter::CheckpointWriter() { bytes_.assign(kHeaderBytes, '\0'); }

void CheckpointWriter::AddName(absl::string_view name, uint8_t kind) {
  Put<uint32_t>(bytes_, static_cast<uint32_t>(name.size()));
  bytes_.append(name.data(), name.size());
  Put<uint8_t>(bytes_, kind);
  ++entries_;
}

void CheckpointWriter::AddInt(absl::string_view name, int64_t value) {
  AddName(name, kInt);
  Put<int64_t>(bytes_, value);
}

void CheckpointWriter::AddDouble(absl::string_view name, double value) {
  AddName(name, kDouble);
  Put<double>(bytes_, value);
}

void CheckpointWriter::AddString(absl::string_view name, absl::string_view value) {
  AddName(name, kString);
  Put<uint64_t>(bytes_, value.size());
  bytes_.append(value.data(), value.size());
}

void CheckpointWriter::AddTensorHeader(absl::string_view name, absl::string_view dtype,
                                       const std::vector<int64_t>& shape, size_t bytes) {
  AddName(name, kTensor);
  Put<uint8_t>(bytes_, static_cast<uint8_t>(dtype.size()));
  bytes_.append(dtype.data(), dtype.size());
  Put<uint32_t>(bytes_, static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) Put<int64_t>(bytes_, d);
  Put<uint64_t>(bytes_, bytes);
}

void CheckpointWriter::AddTensor(absl::string_view name, absl::string_view dtype,
                                 const std::vector<int64_t>& shape, const void* data,
                                 size_t bytes) {
  AddTensorHeader(name, dtype, shape, bytes);
  bytes_.append(static_cast<const char*>(data), bytes);
}

void CheckpointWriter::AddHeldTensor(absl::string_view name, absl::string_view dtype,
                                     const std::vector<int64_t>& shape,
                                     std::shared_ptr<const void> keep_alive, const void* data,
                                     size_t bytes) {
  AddTensorHeader(name, dtype, shape, bytes);
  sealed_.pieces_.push_back({std::move(bytes_)});
  bytes_.clear();
  SealedCheckpoint::Piece held;
  held.keep_alive = std::move(keep_alive);
  held.held = absl::string_view(static_cast<const char*>(data), bytes);
  sealed_.pieces_.push_back(std::move(held));
}

absl::Status CheckpointWriter::WaitForHeldBytes() {
  if (ready_ == nullptr) return absl::OkStatus();
  absl::Status ready = ready_();
  ready_ = nullptr;
  return ready;
}

std::string CheckpointWriter::Finish() && {
  if (sealed_.pieces_.empty()) {
    WriteHeader(entries_, bytes_);
    return std::move(bytes_);
  }
  const SealedCheckpoint sealed = std::move(*this).Seal();
  std::string file;
  file.reserve(sealed.size());
  for (absl::string_view part : sealed.parts()) file.append(part.data(), part.size());
  return file;
}

SealedCheckpoint CheckpointWriter::Seal(int threads) && {
  SealedCheckpoint sealed = std::move(sealed_);
  sealed.pieces_.push_back({std::move(bytes_)});
  // Note [Checkpoint files in parallel]: the payload's CRC from its runs' CRCs.
  auto runs = sealed.Runs(kRunBytes);
  runs.front().first.remove_prefix(kHeaderBytes);  // the first part holds the header
  std::vector<uint32_t> crcs(runs.size());
  ForEachInParallel(runs.size(), threads, [&](size_t i) {
    crcs[i] = Crc32cExtend(0, runs[i].first.data(), runs[i].first.size());
  });
  uint64_t payload = 0;
  uint32_t crc = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    crc = Crc32cCombine(crc, crcs[i], runs[i].first.size());
    payload += runs[i].first.size();
  }
  WriteHeader(entries_, payload, crc, sealed.pieces_.front().bytes);
  return sealed;
}

std::vector<absl::string_view> SealedCheckpoint::parts() const {
  std::vector<absl::string_view> parts;
  parts.reserve(pieces_.size());
  for (const Piece& piece : pieces_) {
    if (piece.view().empty()) continue;
    parts.push_back(piece.view());
  }
  return parts;
}

size_t SealedCheckpoint::size() const {
  size_t size = 0;
  for (const Piece& piece : pieces_) size += piece.view().size();
  return size;
}

absl::StatusOr<CheckpointReader> CheckpointReader::Parse(std::string bytes,
                                                         const std::string& source) {
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(source, ": ", why));
  };
  if (bytes.size() < kHeaderBytes) {
    if (bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": not a Stoker checkpoint"));
    }
    return corrupt(absl::StrCat("truncated: ", bytes.size(), " bytes, shorter than the header"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a Stoker checkpoint (wrong magic)"));
  }
  if (Crc32cExtend(0, bytes.data(), 28) != Get<uint32_t>(bytes, 28)) {
    return corrupt("the header's checksum does not match (corrupt)");
  }
  const uint32_t version = Get<uint32_t>(bytes, 8);
  if (version != kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": checkpoint format version ", version,
                                                   "; this trainer reads version ",
                                                   kCheckpointFormatVersion));
  }
  const uint32_t payload_crc = Get<uint32_t>(bytes, 12);
  const uint64_t payload = Get<uint64_t>(bytes, 16);
  const uint32_t count = Get<uint32_t>(bytes, 24);
  if (bytes.size() - kHeaderBytes < payload) {
    return corrupt(
        absl::StrCat("truncated: ", bytes.size(), " of ", payload + kHeaderBytes, " bytes"));
  }
  if (bytes.size() - kHeaderBytes > payload) {
    return corrupt(absl::StrCat(bytes.size() - kHeaderBytes - payload, " bytes after the end"));
  }
  if (Crc32cExtend(0, bytes.data() + kHeaderBytes, payload) != payload_crc) {
    return corrupt("checksum mismatch (the file is corrupt)");
  }

  CheckpointReader reader;
  reader.source_ = source;
  size_t at = kHeaderBytes;
  const size_t end = bytes.size();
  auto need = [&](size_t n) { return end - at >= n; };
  for (uint32_t i = 0; i < count; ++i) {
    if (!need(4)) return corrupt("malformed entry");
    const uint32_t name_size = Get<uint32_t>(bytes, at);
    at += 4;
    if (!need(static_cast<size_t>(name_size) + 1)) return corrupt("malformed entry name");
    std::string name = bytes.substr(at, name_size);
    at += name_size;
    Entry entry;
    entry.kind = static_cast<uint8_t>(bytes[at]);
    at += 1;
    entry.offset = at;
    switch (entry.kind) {
      case kInt:
      case kDouble:
        if (!need(8)) return corrupt(absl::StrCat("entry ", name, " is cut short"));
        at += 8;
        break;
      case kString: {
        if (!need(8)) return corrupt(absl::StrCat("entry ", name, " is cut short"));
        const uint64_t n = Get<uint64_t>(bytes, at);
        at += 8;
        if (!need(n)) return corrupt(absl::StrCat("entry ", name, " is cut short"));
        at += n;
        break;
      }
      case kTensor: {
        if (!need(1)) return corrupt(absl::StrCat("entry ", name, " is cut short"));
        const uint8_t dtype_size = static_cast<uint8_t>(bytes[at]);
        at += 1;
        if (!need(dtype_size + 4u)) return corrupt(absl::StrCat("entry ", name, " is cut short"));
        at += dtype_size;
        const uint32_t rank = Get<uint32_t>(bytes, at);
        at += 4;
        if (rank > 16 || !need(8u * rank + 8))
          return corrupt(absl::StrCat("entry ", name, " is malformed"));
        at += 8u * rank;
        const uint64_t n = Get<uint64_t>(bytes, at);
        at += 8;
        if (!need(n)) return corrupt(absl::StrCat("entry ", name, " is cut short"));
        at += n;
        break;
      }
      default:
        return corrupt(absl::StrCat("entry ", name, " has unknown kind ", entry.kind));
    }
    if (!reader.entries_.emplace(std::move(name), entry).second) {
      return corrupt("an entry name appears twice");
    }
  }
  if (at != end) return corrupt("entries do not fill the payload");
  reader.bytes_ = std::make_unique<std::string>(std::move(bytes));
  return reader;
}

absl::StatusOr<CheckpointReader::Entry> CheckpointReader::Find(absl::string_view name,
                                                               uint8_t kind) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(source_, ": no entry \"", name, "\""));
  }
  if (it->second.kind != kind) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": entry \"", name, "\" is ",
                                                   KindName(it->second.kind), ", not ",
                                                   KindName(kind)));
  }
  return it->second;
}

absl::StatusOr<int64_t> CheckpointReader::Int(absl::string_view name) const {
  ASSIGN_OR_RETURN(Entry entry, Find(name, kInt));
  return Get<int64_t>(*bytes_, entry.offset);
}

absl::StatusOr<double> CheckpointReader::Double(absl::string_view name) const {
  ASSIGN_OR_RETURN(Entry entry, Find(name, kDouble));
  return Get<double>(*bytes_, entry.offset);
}

absl::StatusOr<std::string> CheckpointReader::String(absl::string_view name) const {
  ASSIGN_OR_RETURN(Entry entry, Find(name, kString));
  const uint64_t n = Get<uint64_t>(*bytes_, entry.offset);
  return bytes_->substr(entry.offset + 8, n);
}

absl::StatusOr<CheckpointTensor> CheckpointReader::Tensor(absl::string_view name) const {
  ASSIGN_OR_RETURN(Entry entry, Find(name, kTensor));
  size_t at = entry.offset;
  const uint8_t dtype_size = static_cast<uint8_t>((*bytes_)[at]);
  at += 1;
  CheckpointTensor tensor;
  tensor.dtype = bytes_->substr(at, dtype_size);
  at += dtype_size;
  const uint32_t rank = Get<uint32_t>(*bytes_, at);
  at += 4;
  for (uint32_t d = 0; d < rank; ++d, at += 8) tensor.shape.push_back(Get<int64_t>(*bytes_, at));
  const uint64_t n = Get<uint64_t>(*bytes_, at);
  at += 8;
  tensor.data = absl::string_view(bytes_->data() + at, n);
  return tensor;
}

bool CheckpointReader::Has(absl::string_view name) const { return entries_.count(name) > 0; }

std::vector<std::string> CheckpointReader::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

std::string CheckpointFileName(int64_t global_step) {
  return absl::StrFormat("%s%012d%s", kPrefix, global_step, kSuffix);
}

absl::StatusOr<std::vector<CheckpointFileInfo>> ListCheckpoints(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr)
    return ErrnoToStatus(errno, absl::StrCat("opening checkpoint directory ", directory));
  std::vector<CheckpointFileInfo> found;
  while (dirent* e = ::readdir(dir)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, kPrefix) || !absl::ConsumeSuffix(&name, kSuffix)) continue;
    int64_t step = 0;
    if (!absl::SimpleAtoi(name, &step) || step < 0) continue;
    found.push_back({absl::StrCat(directory, "/", e->d_name), step});
  }
  ::closedir(dir);
  std::sort(found.begin(), found.end(),
            [](const CheckpointFileInfo& a, const CheckpointFileInfo& b) {
              return a.global_step < b.global_step;
            });
  return found;
}

absl::Status RemoveOldCheckpoints(const std::string& directory, int keep) {
  if (keep <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<CheckpointFileInfo> all, ListCheckpoints(directory));
  for (size_t i = 0; i + keep < all.size(); ++i) {
    if (::unlink(all[i].path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoToStatus(errno, absl::StrCat("removing old checkpoint ", all[i].path));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RemoveStaleTemporaries(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr)
    return ErrnoToStatus(errno, absl::StrCat("opening checkpoint directory ", directory));
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(dir)) {
    const absl::string_view name = e->d_name;
    if (absl::StartsWith(name, absl::StrCat(".", kPrefix)) &&
        absl::StrContains(name, kTemporarySuffix)) {
      stale.push_back(absl::StrCat(directory, "/", name));
    }
  }
  ::closedir(dir);
  for (const std::string& path : stale) ::unlink(path.c_str());
  return static_cast<int>(stale.size());
}

absl::StatusOr<CheckpointReader> LoadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return CheckpointReader::Parse(std::move(bytes), path);
}

absl::StatusOr<absl::optional<CheckpointReader>> LoadNewestValidCheckpoint(
    const std::string& directory, std::vector<std::string>* skipped) {
  absl::StatusOr<std::vector<CheckpointFileInfo>> all = ListCheckpoints(directory);
  if (absl::IsNotFound(all.status())) return absl::optional<CheckpointReader>();
  RETURN_IF_ERROR(all.status());
  for (auto it = all->rbegin(); it != all->rend(); ++it) {
    absl::StatusOr<CheckpointReader> reader = LoadCheckpoint(it->path);
    if (reader.ok()) return absl::optional<CheckpointReader>(std::move(*reader));
    if (skipped != nullptr) skipped->push_back(std::string(reader.status().message()));
  }
  return absl::optional<CheckpointReader>();
}

}  // namespace stoker::trainer
