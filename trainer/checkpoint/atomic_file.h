// Files that are either wholly there or not at all: WriteFileAtomically writes to a
// temporary file in the same directory, fsyncs it, renames it over the destination and
// fsyncs the directory, so that a crash or a kill at any moment leaves the old file or the
// new one, never a torn one. Checkpoints and exported weights are written this way.
#ifndef STOKER_TRAINER_CHECKPOINT_ATOMIC_FILE_H_
#define STOKER_TRAINER_CHECKPOINT_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

// The prefix of the temporary files WriteFileAtomically makes (".<name>.tmp-<pid>"), so
// that a directory scan can recognise and remove those left by a killed process.
inline constexpr char kTemporarySuffix[] = ".tmp-";

// Replaces `path` with `contents` atomically (see above); the file gets mode 0644 less the
// umask. The temporary file is removed on failure. Errors name the path and the call that
// failed (ResourceExhausted for a full disk).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The whole file. NotFound if it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Creates `path` and its missing parents (mode 0755 less the umask); OK if it exists.
absl::Status MakeDirectories(const std::string& path);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_ATOMIC_FILE_H_
