// Checkpoint files: a versioned, checksummed container of named values (integers, doubles,
// strings, tensors as dtype + shape + bytes), and the directory of them a run keeps
// (ckpt-<global step>.stoker, newest K kept, the newest valid one found for resuming).
// What goes into a checkpoint is decided by trainer/checkpoint/training_state.h; this file only
// stores and checks bytes, and needs no libtorch.
//
// Layout (little-endian):
//   header, 32 bytes: magic "STOKERCK" | u32 format version | u32 CRC-32C of the payload |
//                     u64 payload bytes | u32 entry count | u32 CRC-32C of the 28 bytes before
//   payload: entries, each u32 name length | name | u8 kind | value, where value is
//     int64 (kind 1) | double (2) | u64 length + bytes (3, string) |
//     u8 dtype length + dtype ("float32", ...) + u32 rank + int64 dims + u64 length + bytes (4)
// A short file is "truncated"; any flipped bit is a checksum mismatch.
#ifndef STOKER_TRAINER_CHECKPOINT_CHECKPOINT_FILE_H_
#define STOKER_TRAINER_CHECKPOINT_CHECKPOINT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "common/atomic_file.h"

namespace stoker::trainer {

inline constexpr uint32_t kCheckpointFormatVersion = 1;
inline constexpr size_t kCheckpointHeaderBytes = 32;

// For tests and fuzzers: `file` with its first kCheckpointHeaderBytes rewritten as a writer
// would have written them for the payload that follows (magic, format version, payload
// length, both checksums), its entry count kept; a file shorter than a header unchanged.
std::string SealedCheckpointForTesting(std::string file);

// A checkpoint file as the runs of bytes that follow each other in it: the header and
// entries it owns, and the tensor bytes it holds by reference (CheckpointWriter::AddHeldTensor).
// Move-only; thread-compatible (sealed on one thread, written on another).
//
//   RETURN_IF_ERROR(WriteFileAtomically(path, std::move(writer).Seal().parts()));
class SealedCheckpoint {
 public:
  SealedCheckpoint(SealedCheckpoint&&) = default;
  SealedCheckpoint& operator=(SealedCheckpoint&&) = default;

  // The file's bytes in order, valid while this object lives and is not moved.
  std::vector<absl::string_view> parts() const;
  // The file's size in bytes.
  size_t size() const;
  // The file's bytes in runs of at most `max_bytes` (a part longer than that is split), in
  // order, each with its offset in the file.
  std::vector<std::pair<absl::string_view, uint64_t>> Runs(size_t max_bytes) const;

 private:
  friend class CheckpointWriter;
  // Owned bytes, or bytes held by reference (`held`, kept alive by `keep_alive`).
  struct Piece {
    std::string bytes;
    std::shared_ptr<const void> keep_alive;
    absl::string_view held;
    absl::string_view view() const { return held.data() != nullptr ? held : bytes; }
  };
  SealedCheckpoint() = default;
  std::vector<Piece> pieces_;
};

// Builds a checkpoint in memory. Thread-compatible.
//
//   CheckpointWriter writer;
//   writer.AddInt("epoch", 3);
//   writer.AddTensor("model/fc.weight", "float32", {10, 64}, data, bytes);
//   RETURN_IF_ERROR(WriteFileAtomically(path, std::move(writer).Finish()));
class CheckpointWriter {
 public:
  CheckpointWriter();
  CheckpointWriter(CheckpointWriter&&) = default;
  CheckpointWriter& operator=(CheckpointWriter&&) = default;

  void AddInt(absl::string_view name, int64_t value);
  void AddDouble(absl::string_view name, double value);
  void AddString(absl::string_view name, absl::string_view value);
  // Copies the `bytes` at `data` now.
  void AddTensor(absl::string_view name, absl::string_view dtype, const std::vector<int64_t>& shape,
                 const void* data, size_t bytes);
  // As AddTensor, but the bytes at `data` are not copied: they are read when the file is
  // sealed and written, and must stay unchanged until then. `keep_alive` owns them and is
  // held as long as this writer or its SealedCheckpoint.
  void AddHeldTensor(absl::string_view name, absl::string_view dtype,
                     const std::vector<int64_t>& shape, std::shared_ptr<const void> keep_alive,
                     const void* data, size_t bytes);
  // The size of the file so far, in bytes.
  size_t size() const { return sealed_.size() + bytes_.size(); }
  // What says when the held bytes are there to be read (copies from a device still in
  // flight when the tensors were added): WaitForHeldBytes calls it, on the thread that seals.
  void SetHeldBytesReady(absl::AnyInvocable<absl::Status()> ready) { ready_ = std::move(ready); }
  // Blocks until the held bytes may be read (SetHeldBytesReady); the error of the copies
  // that filled them, if any. Call before Finish or Seal.
  absl::Status WaitForHeldBytes();
  // The file's bytes: header (with the checksums) and payload.
  std::string Finish() &&;
  // The file without joining its parts into one buffer: computes the checksums (reading
  // the held tensors, on `threads` threads: Note [Checkpoint files in parallel] in
  // checkpoint_file.cc) and writes the header.
  SealedCheckpoint Seal(int threads = 1) &&;

 private:
  void AddName(absl::string_view name, uint8_t kind);
  void AddTensorHeader(absl::string_view name, absl::string_view dtype,
                       const std::vector<int64_t>& shape, size_t bytes);
  absl::AnyInvocable<absl::Status()> ready_;  // null: the held bytes are there
  SealedCheckpoint sealed_;                   // the pieces before bytes_
  std::string bytes_;  // the header placeholder (in the first piece), then the payload
  uint32_t entries_ = 0;
};

// Writes `checkpoint` to `path` as WriteFileAtomically does (common/atomic_file.h: the
// temporary, `mode`, fsync, rename, fsync of the directory), its bytes written at their
// offsets by `threads` threads (Note [Checkpoint files in parallel]). With `after_part` (a
// test seam) the parts are written in order on this thread, and it is called after each.
absl::Status WriteCheckpointAtomically(const std::string& path, const SealedCheckpoint& checkpoint,
                                       mode_t mode, int threads,
                                       const PartWrittenHook& after_part = nullptr);

// The threads a checkpoint is sealed and written with: the machine's cores, at most 8.
int CheckpointWriteThreads();

struct CheckpointTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  absl::string_view data;  // into the reader's buffer
};

// A checked, parsed checkpoint. Move-only (views point into its buffer).
class CheckpointReader {
 public:
  // Checks magic, version, length and checksums, then indexes the entries. DataLoss for a
  // truncated or corrupt file, InvalidArgument for something that is not a checkpoint or
  // has another format version; every message starts with `source`.
  static absl::StatusOr<CheckpointReader> Parse(std::string bytes, const std::string& source);

  CheckpointReader(CheckpointReader&&) = default;
  CheckpointReader& operator=(CheckpointReader&&) = default;

  // NotFound (naming the entry and the source) if absent, InvalidArgument if of another kind.
  absl::StatusOr<int64_t> Int(absl::string_view name) const;
  absl::StatusOr<double> Double(absl::string_view name) const;
  absl::StatusOr<std::string> String(absl::string_view name) const;
  absl::StatusOr<CheckpointTensor> Tensor(absl::string_view name) const;
  bool Has(absl::string_view name) const;
  // Names of the entries, sorted.
  std::vector<std::string> Names() const;
  const std::string& source() const { return source_; }
  // The whole file, as read (to hand it to other ranks).
  const std::string& bytes() const { return *bytes_; }
  size_t size_bytes() const { return bytes_->size(); }

 private:
  struct Entry {
    uint8_t kind = 0;
    size_t offset = 0;  // of the value, in bytes_
  };
  CheckpointReader() = default;
  absl::StatusOr<Entry> Find(absl::string_view name, uint8_t kind) const;

  std::unique_ptr<std::string> bytes_;  // stable address for the views
  std::string source_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// ---- The checkpoint directory ----

// "ckpt-000000001234.stoker" for global step 1234.
std::string CheckpointFileName(int64_t global_step);

struct CheckpointFileInfo {
  std::string path;
  int64_t global_step = 0;
};

// The checkpoints in `directory`, oldest first (by global step). NotFound if the directory
// does not exist.
absl::StatusOr<std::vector<CheckpointFileInfo>> ListCheckpoints(const std::string& directory);

// Deletes all but the newest `keep` checkpoints (keep 0: none deleted).
absl::Status RemoveOldCheckpoints(const std::string& directory, int keep);

// Deletes temporary files left by a writer that was killed mid-write. Returns how many.
absl::StatusOr<int> RemoveStaleTemporaries(const std::string& directory);

// The newest checkpoint in `directory` that parses and checks out, falling back past
// invalid ones; each one skipped is described in `skipped` ("<path>: <why>"). nullopt if
// there is none (or no directory).
absl::StatusOr<absl::optional<CheckpointReader>> LoadNewestValidCheckpoint(
    const std::string& directory, std::vector<std::string>* skipped);

// Reads and checks one checkpoint file.
absl::StatusOr<CheckpointReader> LoadCheckpoint(const std::string& path);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_CHECKPOINT_FILE_H_
