// What rank 0 reports about a run and where: progress lines, JSON lines, TensorBoard, the
// summary, the per-batch logs tests read, the step profile and the exported weights. With
// its check. Free of libtorch.
#ifndef STOKER_TRAINER_REPORT_REPORT_OPTIONS_H_
#define STOKER_TRAINER_REPORT_REPORT_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

// auto: redraw the progress line in place when stderr is a terminal or the environment says
// the job's output goes to one (STOKER_PROGRESS_IN_PLACE=1: under mpirun the ranks' stderr
// is a pipe); in place; or one line each time.
enum class ProgressMode { kAuto, kInPlace, kLines };

// The steps --trace records without --trace_steps: this many after the warm-up.
inline constexpr int kDefaultTraceSteps = 10;

absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view name);

struct ReportOptions {
  int log_every = 10;  // optimizer steps between progress lines
  ProgressMode progress = ProgressMode::kAuto;
  std::string metrics_out;       // JSON summary at the end
  std::string metrics_jsonl;     // one JSON object per progress line, validation, stop and end
  std::string tensorboard_dir;   // TensorBoard event file (scalars)
  std::string loss_log;          // "epoch step loss" for every batch (syncs each step)
  std::string export_path;       // the final state dict as torch.load reads it
  std::string final_params_out;  // each rank: raw parameters to <path>.rank<r> (tests)
  // Each rank writes "epoch step index..." (the dataset indices of the samples) for every
  // trained batch to <path>.rank<r>: what tests check sampling and seeding with.
  std::string sample_log;
  int profile_steps = 0;  // time breakdown over this many steps after the warm-up
  // The profiled steps' GPU kernels as a Chrome trace (trainer/report/kernel_trace.h), to this
  // path (<path>.rank<r> when there are several ranks).
  std::string kernel_trace;
  // --kernel_trace_ops: the kernel trace also holds the host's ATen operators and the
  // program's calls, so that each kernel can be attributed to the call that launched it
  // (tools/kernel_breakdown.py). Recording them costs host time for each operator.
  bool kernel_trace_ops = false;
  // --trace: the directory where each rank writes its trace of the traced steps
  // (rank<r>.json, trainer/traced_steps.h) and asks its node's data service to write its
  // own; empty: off.
  std::string trace_dir;
  // --trace_steps: "A:B", the run's optimizer steps [A, B) that are traced (checked by
  // ValidateOptions); empty: kDefaultTraceSteps steps after the warm-up.
  std::string trace_steps;

  // InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_REPORT_OPTIONS_H_
