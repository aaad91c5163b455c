// When rank 0 writes checkpoints, how many it keeps, where a run resumes from, and the
// planned early stop of time-sliced jobs. With its check. Free of libtorch.
#ifndef STOKER_TRAINER_CHECKPOINT_CHECKPOINT_OPTIONS_H_
#define STOKER_TRAINER_CHECKPOINT_CHECKPOINT_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

// --resume: the newest valid checkpoint of the directory (if any), none, or one file.
struct ResumeFrom {
  enum class Mode { kAuto, kNone, kFile };
  Mode mode = Mode::kAuto;
  std::string file;  // kFile

  // "auto", "none" or a path; InvalidArgument for an empty value.
  static absl::StatusOr<ResumeFrom> Parse(absl::string_view flag_value);
};

struct CheckpointOptions {
  std::string dir;     // empty: no checkpoints
  int every_steps = 0;   // optimizer steps between checkpoints; 0: not by steps
  int every_epochs = 1;  // epochs between checkpoints; 0: not by epochs
  int keep = 3;          // the newest K are kept; 0 keeps all
  ResumeFrom resume;
  // Ends this run after this many optimizer steps as a preemption would (checkpoint, exit
  // code kExitStoppedEarly): for time-sliced jobs and tests. 0: off.
  int stop_after_steps = 0;

  // InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_CHECKPOINT_OPTIONS_H_
