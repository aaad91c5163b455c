#include "trainer/checkpoint/run_checkpoints.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "trainer/checkpoint/atomic_file.h"

namespace stoker::trainer {
namespace {

// Rank 0's choice under --resume.
absl::StatusOr<absl::optional<CheckpointReader>> PickCheckpoint(const CheckpointOptions& o) {
  switch (o.resume.mode) {
    case ResumeFrom::Mode::kNone:
      return absl::optional<CheckpointReader>();
    case ResumeFrom::Mode::kFile: {
      absl::StatusOr<CheckpointReader> loaded = LoadCheckpoint(o.resume.file);
      if (!loaded.ok()) {
        return absl::Status(loaded.status().code(),
                            absl::StrCat("--resume=", o.resume.file, ": ", loaded.status().message()));
      }
      return absl::optional<CheckpointReader>(std::move(*loaded));
    }
    case ResumeFrom::Mode::kAuto:
      break;
  }
  if (o.dir.empty()) return absl::optional<CheckpointReader>();
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(absl::optional<CheckpointReader> checkpoint, LoadNewestValidCheckpoint(o.dir, &skipped));
  for (const std::string& why : skipped) LogWarning("skipping an invalid checkpoint: %s", why);
  if (!checkpoint.has_value() && !skipped.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("--resume=auto: no valid checkpoint in ", o.dir, " (",
                                                      skipped.size(),
                                                      " invalid; see above). Pass --resume=none to start afresh"));
  }
  return checkpoint;
}

}  // namespace

absl::StatusOr<RunCheckpoints> RunCheckpoints::Open(const CheckpointOptions& options, bool writer) {
  RunCheckpoints checkpoints(options, writer);
  if (!checkpoints.writes()) return checkpoints;
  absl::Status made = MakeDirectories(options.dir);
  if (!made.ok()) return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir: ", made.message()));
  ASSIGN_OR_RETURN(int stale, RemoveStaleTemporaries(options.dir));
  if (stale > 0) LogInfo("removed %d partial checkpoint file(s) of an interrupted write", stale);
  return checkpoints;
}

absl::StatusOr<absl::optional<CheckpointReader>> RunCheckpoints::LoadForResume(Communicator& host) const {
  const bool root = host.rank() == 0;
  absl::optional<CheckpointReader> checkpoint;
  int64_t size = -1;
  if (root) {
    ASSIGN_OR_RETURN(checkpoint, PickCheckpoint(options_));
    if (checkpoint.has_value()) size = static_cast<int64_t>(checkpoint->bytes().size());
  }
  if (host.world_size() == 1) return checkpoint;
  RETURN_IF_ERROR(host.Broadcast(&size, sizeof(size), 0));
  if (size >= 0) {
    if (root) {
      RETURN_IF_ERROR(host.Broadcast(const_cast<char*>(checkpoint->bytes().data()), size, 0));
    } else {
      std::string bytes(static_cast<size_t>(size), '\0');
      RETURN_IF_ERROR(host.Broadcast(bytes.data(), size, 0));
      ASSIGN_OR_RETURN(CheckpointReader parsed, CheckpointReader::Parse(std::move(bytes), "the checkpoint from rank 0"));
      checkpoint = std::move(parsed);
    }
  }
  RETURN_IF_ERROR(host.Synchronize());
  return checkpoint;
}

absl::StatusOr<std::string> RunCheckpoints::Write(int64_t global_step, const std::string& bytes) const {
  if (!writes()) return std::string();
  const std::string path = absl::StrCat(options_.dir, "/", CheckpointFileName(global_step));
  RETURN_IF_ERROR(WriteFileAtomically(path, bytes));
  RETURN_IF_ERROR(RemoveOldCheckpoints(options_.dir, options_.keep));
  return path;
}

}  // namespace stoker::trainer
