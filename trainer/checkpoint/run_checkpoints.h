// RunCheckpoints: the checkpoints of one run in --checkpoint_dir. Rank 0 writes them
// (atomically, owner-only unless --checkpoint_mode, keeping the newest --keep_checkpoints)
// while it holds the directory's lock, on its writer thread with --checkpoint_async (Note
// [Asynchronous checkpoints]); a starting run picks the one to resume from (--resume) on
// rank 0 and hands its bytes to every rank (Note [One run per checkpoint directory]).
//
// Note [Asynchronous checkpoints]
// With --checkpoint_async the step waits only while the copy of the training state to host
// memory is enqueued (on a GPU, into the pinned memory of SnapshotBuffers, made once at
// start: Note [Snapshot buffers] in training_state.h); waiting for that copy, sealing it
// (the CRC), the write, both fsyncs, the rename and the removal of old checkpoints run on the
// writer thread (WriteBehind) while training goes on, the CRC and the write on several
// threads (Note [Checkpoint files in parallel] in checkpoint_file.cc). One write is in flight
// at a time: a checkpoint due while the previous one is still being written first waits for
// it (and the run says so, with the time), so that one snapshot at most is held in host
// memory and every checkpoint asked for is written; skipping it instead would leave a run
// that checkpoints faster than its disk writes with fewer checkpoints than it asked for,
// silently behind. A wait that shows means checkpoints are due more often than the disk
// takes them. Every rule of the synchronous write stays:
// the lock is held until the writer thread has ended, the file appears under its name only
// once complete (a kill mid-write leaves a temporary file, removed by the next run), old
// checkpoints are removed only after the new one is durable, and the mode is the same. A
// failed write is never lost: the training thread returns its error (exit code 74) at the
// next step boundary, or at the next checkpoint, stop or end of the run, whichever comes
// first. A stop (--stop_after_steps, a preemption signal) and the end of the run wait for
// the write in flight before the process exits, and so does a run that fails otherwise
// (the destructor). Never worse than the synchronous write: the step waits for a subset of
// its work (the copy it makes too), the host holds one copy of the state as the synchronous
// write does (on a GPU, in the same pinned memory in either mode), and
// a failure is reported at most one step later, before any later checkpoint could replace
// the last good one.
#ifndef STOKER_TRAINER_CHECKPOINT_RUN_CHECKPOINTS_H_
#define STOKER_TRAINER_CHECKPOINT_RUN_CHECKPOINTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "common/unique_fd.h"
#include "trainer/checkpoint/checkpoint_file.h"
#include "trainer/checkpoint/checkpoint_options.h"
#include "trainer/checkpoint/write_behind.h"
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
  // past the newest --keep_checkpoints, on this thread. Returns its path; "" (and writes
  // nothing) when this rank does not write checkpoints.
  absl::StatusOr<std::string> Write(int64_t global_step, const std::string& bytes) const;

  // Saves `checkpoint` as the checkpoint after `global_step` optimizer steps as Write does:
  // on this thread, or with --checkpoint_async handed to the writer thread (after the write
  // in flight, if any, has ended), returning at once. Returns its path ("" when this rank
  // does not write checkpoints), or the error of an earlier write that failed.
  absl::StatusOr<std::string> Save(int64_t global_step, CheckpointWriter checkpoint);

  // Waits for the write in flight (--checkpoint_async). The error of any write that failed
  // (kExitCheckpointIo), OK if none.
  absl::Status WaitForWrites() const;

  // Without waiting: the error of an asynchronous write that failed, OK if none.
  absl::Status WriteError() const;

 private:
  RunCheckpoints(const CheckpointOptions& options, bool writer)
      : options_(options), writer_(writer) {}

  CheckpointOptions options_;
  bool writer_;
  UniqueFd lock_;  // <dir>/LOCK, flock()ed for as long as this object lives
  // --checkpoint_async's writer thread; after the lock, so that it ends (waiting for its
  // write) before the lock is released.
  std::unique_ptr<WriteBehind> writes_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_RUN_CHECKPOINTS_H_
