// Files that are either wholly there or not at all: WriteFileAtomically writes to a
// temporary file in the same directory, fsyncs it, renames it over the destination and
// fsyncs the directory, so that a crash or a kill at any moment leaves the old file or the
// new one, never a torn one. Checkpoints and exported weights are written this way.
#ifndef STOKER_COMMON_ATOMIC_FILE_H_
#define STOKER_COMMON_ATOMIC_FILE_H_

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stoker {

// The mark of the temporary files WriteFileAtomically makes (".<name>.tmp-<pid>-<random>"),
// so that a directory scan can recognise and remove those left by a killed process.
inline constexpr char kTemporarySuffix[] = ".tmp-";

// Checkpoints and exported weights are owner-only unless --checkpoint_mode says otherwise,
// and so are the directories made for them.
inline constexpr mode_t kPrivateFileMode = 0600;
inline constexpr mode_t kPrivateDirectoryMode = 0700;

// The mode of a directory that holds files of `file_mode`: the same bits, plus search (x)
// wherever reading is allowed (0600 -> 0700, 0640 -> 0750).
mode_t DirectoryModeFor(mode_t file_mode);

// Replaces `path` with `contents` atomically (see above); the file gets exactly `mode`,
// whatever the umask. The temporary file is created with O_CREAT|O_EXCL|O_NOFOLLOW under a
// name no other writer uses, so it never follows a symlink nor opens a file someone else
// placed there, and it is removed on failure. Errors name the path and the call that
// failed (ResourceExhausted for a full disk).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 mode_t mode = kPrivateFileMode);

// Called after each part of a gathered write is in the temporary file (before its fsync),
// with the bytes written so far: a seam for tests of a process killed in the middle of a
// write.
using PartWrittenHook = std::function<void(size_t bytes_written)>;

// As above, with the contents the concatenation of `parts`, written one after the other
// without joining them in memory.
absl::Status WriteFileAtomically(const std::string& path, absl::Span<const absl::string_view> parts,
                                 mode_t mode = kPrivateFileMode,
                                 const PartWrittenHook& after_part = nullptr);

// What fills the temporary file of WriteFileAtomicallyWith through its descriptor (writes
// at offsets from any number of threads, pwrite), returning 0 or the errno of the call that
// failed. The descriptor stays open until it returns.
using FileFill = std::function<int(int fd)>;

// As above, with the contents whatever `fill` writes; every other rule is the same (the
// temporary, its mode, fsync, rename, fsync of the directory, removal on failure).
absl::Status WriteFileAtomicallyWith(const std::string& path, mode_t mode, const FileFill& fill);

// Writes all of `data` at the file position of `fd` (write, retried on EINTR and short
// writes; only write, which the data service's sandbox allows, where pwrite is not).
// 0, or the errno of the write that failed (EIO for a write that wrote nothing).
int WriteAll(int fd, absl::string_view data);

// Writes all of `data` at `offset` of `fd` (pwrite, retried on EINTR and short writes).
// 0, or the errno of the write that failed. Thread-safe on one descriptor.
int PwriteAll(int fd, absl::string_view data, off_t offset);

// The whole file. NotFound if it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Creates `path` and its missing parents with `mode` less the umask (existing ones keep
// theirs); OK if it exists.
absl::Status MakeDirectories(const std::string& path, mode_t mode = kPrivateDirectoryMode);

}  // namespace stoker

#endif  // STOKER_COMMON_ATOMIC_FILE_H_
