// RunCheckpoints: the checkpoints of one run in --checkpoint_dir. Rank 0 writes them
// (atomically, owner-only unless --checkpoint_mode, keeping the newest --keep_checkpoints)
// while it holds the directory's lock; a starting run picks the one to resume from
// (--resume) on rank 0 and hands its bytes to every rank (Note [One run per checkpoint
// directory]).
#ifndef STOKER_TRAINER_CHECKPOINT_RUN_CHECKPOINTS_H_
#define STOKER_TRAINER_CHECKPOINT_RUN_CHECKPOINTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "common/unique_fd.h"
#include "trainer/checkpoint/checkpoint_file.h"
#include "trainer/checkpoint/checkpoint_options.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Owned by the training thread. Move-only (it holds the directory's lock).
class RunCheckpoints {
 public:
  // On the writing rank (`writer`, rank 0) with a directory: makes it (DirectoryModeFor
  // --checkpoint_mode), takes its lock (FailedPrecondition naming the holder while another
  // run holds it), checks or records the run identity (FailedPrecondition naming both when
  // the directory is another run's), and then removes the partial files of an interrupted
  // write. Errors name --checkpoint_dir; the refusals carry kExitUsage. Every error of
  // reading or writing checkpoint files carries kExitCheckpointIo (common/exit_codes.h).
  static absl::StatusOr<RunCheckpoints> Open(const CheckpointOptions& options, bool writer);

  // Whether this rank writes checkpoints (rank 0 with --checkpoint_dir).
  bool writes() const { return writer_ && !options_.dir.empty(); }

  // The checkpoint to resume from, on every rank: rank 0 reads it (--resume=auto: the
  // newest valid one in the directory, skipping damaged ones with a warning; a file; or
  // none) and broadcasts its bytes over `host`. Must be called in the same order on every
  // rank.
  absl::StatusOr<absl::optional<CheckpointReader>> LoadForResume(Communicator& host) const;

  // Writes `bytes` as the checkpoint after `global_step` optimizer steps and removes those
  // past the newest --keep_checkpoints. Returns its path; "" (and writes nothing) when this
  // rank does not write checkpoints.
  absl::StatusOr<std::string> Write(int64_t global_step, const std::string& bytes) const;

 private:
  RunCheckpoints(const CheckpointOptions& options, bool writer)
      : options_(options), writer_(writer) {}

  CheckpointOptions options_;
  bool writer_;
  UniqueFd lock_;  // <dir>/LOCK, flock()ed for as long as this object lives
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_RUN_CHECKPOINTS_H_
