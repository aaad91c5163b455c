#include "trainer/checkpoint/checkpoint_options.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<ResumeFrom> ResumeFrom::Parse(absl::string_view flag_value) {
  ResumeFrom from;
  if (flag_value == "auto") return from;
  if (flag_value == "none") {
    from.mode = Mode::kNone;
    return from;
  }
  if (flag_value.empty()) return absl::InvalidArgumentError("--resume=: use auto, none or a checkpoint file");
  from.mode = Mode::kFile;
  from.file = std::string(flag_value);
  return from;
}

absl::Status CheckpointOptions::Validate() const {
  if (every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_every_steps=", every_steps, ": must be >= 0"));
  }
  if (every_epochs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_every_epochs=", every_epochs, ": must be >= 0"));
  }
  if (keep < 0) return absl::InvalidArgumentError(absl::StrCat("--keep_checkpoints=", keep, ": must be >= 0 (0: keep all)"));
  if (resume.mode == ResumeFrom::Mode::kFile && resume.file.empty()) {
    return absl::InvalidArgumentError("--resume=: use auto, none or a checkpoint file");
  }
  if (stop_after_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--stop_after_steps=", stop_after_steps, ": must be >= 0"));
  }
  if (stop_after_steps > 0 && dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--stop_after_steps=", stop_after_steps,
                                                   ": needs --checkpoint_dir (the run stops to be resumed from its "
                                                   "checkpoint)"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
