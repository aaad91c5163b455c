// When rank 0 writes checkpoints, how many it keeps, where a run resumes from, and the
// planned early stop of time-sliced jobs. With its check. Free of libtorch.
#ifndef STOKER_TRAINER_CHECKPOINT_CHECKPOINT_OPTIONS_H_
#define STOKER_TRAINER_CHECKPOINT_CHECKPOINT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace stoker::trainer {

// --resume: the newest valid checkpoint of the directory (if any), none, or one file.
struct ResumeFrom {
  enum class Mode { kAuto, kNone, kFile };
  Mode mode = Mode::kAuto;
  std::string file;  // kFile

  // "auto", "none" or a path; InvalidArgument for an empty value.
  static absl::StatusOr<ResumeFrom> Parse(absl::string_view flag_value);
};

// --checkpoint_mode: an octal file mode ("0600", "640"); InvalidArgument naming the flag
// unless it is within 0777 and lets the owner read and write.
absl::StatusOr<uint32_t> ParseCheckpointMode(absl::string_view flag_value);

// --checkpoint_async's default (Note [Asynchronous checkpoints] in run_checkpoints.h).
inline constexpr bool kCheckpointAsyncByDefault = true;

// For tests: the environment variable that sets CheckpointOptions::write_pause_for_testing
// (milliseconds).
inline constexpr char kCheckpointWritePauseVariable[] = "STOKER_TEST_CHECKPOINT_WRITE_PAUSE_MS";

struct CheckpointOptions {
  std::string dir;       // empty: no checkpoints
  int every_steps = 0;   // optimizer steps between checkpoints; 0: not by steps
  int every_epochs = 1;  // epochs between checkpoints; 0: not by epochs
  int keep = 3;          // the newest K are kept; 0 keeps all
  ResumeFrom resume;
  // Ends this run after this many optimizer steps as a preemption would (checkpoint, exit
  // code kExitStoppedEarly): for time-sliced jobs and tests. 0: off.
  int stop_after_steps = 0;
  // The mode of checkpoints and exported weights (--checkpoint_mode); directories made for
  // them get the same bits plus search where reading is allowed (0600 -> 0700).
  uint32_t file_mode = 0600;
  // Rank 0 writes checkpoints on a writer thread while training goes on (--checkpoint_async):
  // the step waits only while the state is copied to host memory.
  bool async = kCheckpointAsyncByDefault;
  // For tests of a process killed in the middle of a checkpoint write: a pause after the
  // first part of each checkpoint file is in its temporary file (kCheckpointWritePauseVariable).
  // Zero: none.
  absl::Duration write_pause_for_testing = absl::ZeroDuration();
  // What makes two runs the same run (the model, its classes and input size, the seed),
  // recorded in the directory's RUN file by its first run and checked by every later one:
  // a run never resumes nor overwrites another run's checkpoints. Set by the trainer
  // (RunIdentity in trainer/train_loop.cc); empty: not checked.
  std::string run_identity;

  // InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_CHECKPOINT_OPTIONS_H_
