#include "trainer/checkpoint/checkpoint_options.h"

#include "absl/strings/str_format.h"
#include "common/flag_value.h"

namespace stoker::trainer {

absl::StatusOr<ResumeFrom> ResumeFrom::Parse(absl::string_view flag_value) {
  ResumeFrom from;
  if (flag_value == "auto") return from;
  if (flag_value == "none") {
    from.mode = Mode::kNone;
    return from;
  }
  if (flag_value.empty())
    return absl::InvalidArgumentError("--resume=: use auto, none or a checkpoint file");
  from.mode = Mode::kFile;
  from.file = std::string(flag_value);
  return from;
}

absl::StatusOr<uint32_t> ParseCheckpointMode(absl::string_view flag_value) {
  uint32_t mode = 0;
  bool digits = !flag_value.empty() && flag_value.size() <= 4;
  for (char c : flag_value) {
    if (c < '0' || c > '7') digits = false;
    mode = mode * 8 + static_cast<uint32_t>(c - '0');
  }
  if (!digits || mode > 0777) {
    return FlagValueError("checkpoint_mode", flag_value,
                          "not an octal file mode like 0600 or 0640");
  }
  if ((mode & 0600) != 0600) {
    return FlagValueError("checkpoint_mode", flag_value,
                          "the owner must be able to read and write (include 0600)");
  }
  return mode;
}

absl::Status CheckpointOptions::Validate() const {
  if (file_mode > 0777 || (file_mode & 0600) != 0600) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--checkpoint_mode=%04o: the owner must be able to read and write (include 0600)",
        file_mode));
  }
  if (every_steps < 0) {
    return FlagValueError("checkpoint_every_steps", every_steps, "must be >= 0");
  }
  if (every_epochs < 0) {
    return FlagValueError("checkpoint_every_epochs", every_epochs, "must be >= 0");
  }
  if (keep < 0) return FlagValueError("keep_checkpoints", keep, "must be >= 0 (0: keep all)");
  if (resume.mode == ResumeFrom::Mode::kFile && resume.file.empty()) {
    return absl::InvalidArgumentError("--resume=: use auto, none or a checkpoint file");
  }
  if (stop_after_steps < 0) {
    return FlagValueError("stop_after_steps", stop_after_steps, "must be >= 0");
  }
  if (stop_after_steps > 0 && dir.empty()) {
    return FlagValueError("stop_after_steps", stop_after_steps,
                          "needs --checkpoint_dir (the run stops to be resumed from its "
                          "checkpoint)");
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
