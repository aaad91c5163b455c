// RunReporter: what a training run tells the user, rank 0 mostly: the progress line, JSON
// lines (--metrics_jsonl), TensorBoard scalars, the per-batch logs tests read (--loss_log,
// and --sample_log on every rank), the validation and stop notes, and the summary at the
// end (--metrics_out). It also keeps the throughput meters (the progress window, and the
// measured figure after the warm-up) and the loss window between progress lines.
#ifndef STOKER_TRAINER_REPORT_RUN_REPORTER_H_
#define STOKER_TRAINER_REPORT_RUN_REPORTER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "trainer/report/progress.h"
#include "trainer/report/report_options.h"
#include "trainer/report/step_profiler.h"
#include "trainer/report/step_verdict.h"
#include "trainer/report/tensorboard_writer.h"
#include "trainer/report/throughput_meter.h"

namespace stoker::trainer {

// One progress line's facts (the loss already averaged over ranks).
struct TrainProgress {
  int64_t epoch = 0;  // 0-based
  int64_t batches_done = 0;
  int64_t batches_per_epoch = 0;
  int64_t global_step = 0;
  int64_t total_steps = 0;
  int64_t steps_this_run = 0;
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = NAN;  // NaN: not computed (no clipping)
  std::string memory;
};

struct ValidationScores {
  int64_t samples = 0;
  double top1 = 0, top5 = 0, loss = 0;
};

// One checkpoint as the reports show it.
struct CheckpointReport {
  std::string path;
  int64_t epoch = 0;  // 0-based, as RunPosition
  int64_t batches_done = 0;
  int64_t global_step = 0;
  int64_t bytes = 0;
  bool async = false;  // written on the writer thread (--checkpoint_async)
  double stall = 0;    // seconds the step waited: the whole write, or (async) the copy
  double waited = 0;   // of `stall` (async): seconds waiting for the previous write to end
};

// What a run is, for its summary.
struct RunDescription {
  std::string model;
  int epochs = 0;
  int world_size = 1;
  int batch_size = 0;
  int image_size = 0;
  bool synthetic = false;
  bool data_only = false;
  int warmup_steps = 0;
};

// How a run ended, for its summary.
struct RunSummary {
  int64_t global_step = 0;
  int64_t steps_this_run = 0;
  bool loss_scaling = false;  // fp16: scale and skipped steps are reported
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  std::string exported;                    // the --export path written, or empty
  const StepProfiler* profiler = nullptr;  // with measured steps, or nullptr
};

// The GPU decode share as the reports show it. The run hands the reporter a source of
// these (it reads the share its input side sets), and the progress line, the JSON lines and
// the summary call it each time they are written.
struct DecodeShareReport {
  // How the share came about ("off", "fixed", "adaptive", "data service"); empty when no
  // ring of this rank reports a share (synthetic input, or not opened yet): nothing is said.
  std::string mode;
  double share = 0.0;     // of the last batch trained
  bool off = false;       // nothing is decoded on the GPU: the progress line leaves it out
  bool adaptive = false;  // the summary says whether the controller has settled
  bool settled = false;   // adaptive: the controller has settled on `share`
};
using DecodeShareSource = std::function<DecodeShareReport()>;

// Owned by the training thread.
class RunReporter {
 public:
  using Clock = ThroughputMeter::Clock;

  // Opens the outputs `options` names: --sample_log on every rank, the rest on rank 0.
  // Errors name the flag. `decode_share` (may be null: nothing is said about it) is called
  // on the training thread.
  static absl::StatusOr<std::unique_ptr<RunReporter>> Create(
      const ReportOptions& options, int rank, const RunDescription& run,
      DecodeShareSource decode_share = nullptr);

  bool rank0() const { return rank_ == 0; }

  // Restarts every clock: training starts now.
  void StartRun();
  // After the warm-up: the measured throughput starts now (the device has finished it).
  void StartMeasuring();
  // Leaves the time since `since` (validation, a checkpoint) out of the throughput figures.
  void ExcludeSince(Clock::time_point since);

  // Per micro-batch: its wait for data (the host's, and the GPU's where the feeder measures
  // it: TrainingBatch::gpu_input_wait), and --sample_log's line.
  void AddBatch(int64_t epoch, int64_t index, absl::Duration data_wait,
                std::optional<absl::Duration> gpu_input_wait, const std::vector<int64_t>& samples);
  // --loss_log: one micro-batch's loss (waits for it on the device). No-op without it.
  absl::Status LogLoss(int64_t epoch, int64_t index, const at::Tensor& loss);
  // Per optimizer step: the images it trained (over all ranks) and its mean loss (undefined
  // when nothing trains). The first step of a run starts the clock of the ETA.
  void AddStep(int64_t images, const at::Tensor& step_loss, bool first_of_run);
  // The mean step loss since the last call, as a one-element float32 tensor on the loss's
  // device (for the caller to average over ranks); starts a new window.
  at::Tensor TakeMeanLoss();

  // Rank 0: the progress line, its JSON line and TensorBoard scalars.
  absl::Status Progress(const TrainProgress& progress);
  // Rank 0: what is about to train.
  void Starting(int64_t batches_per_epoch, int64_t steps_per_epoch, int accumulate,
                double learning_rate, absl::string_view schedule);
  // Rank 0: a log line that does not break the progress line.
  void Note(const std::string& line);
  absl::Status Validation(int64_t epoch, int64_t global_step, const ValidationScores& scores,
                          double seconds);
  // Rank 0: a checkpoint's log line (with the step's stall) and its JSON line.
  absl::Status Checkpoint(const CheckpointReport& checkpoint);
  // Rank 0: why the run stopped early and how to resume it.
  absl::Status Stopped(const std::string& why, const std::string& reason, int64_t epoch,
                       int64_t batches_done, int64_t batches_per_epoch, int64_t global_step,
                       const std::string& checkpoint);
  // Rank 0: a traced step's verdict (--trace): its line, and a "trace_step" JSON line. The
  // window's verdict so far names the job's bound on the progress line, and the summary
  // says it at the end (a "trace_verdict" JSON line).
  absl::Status TraceVerdict(const StepVerdict& verdict);
  // Rank 0: the summary line(s), the "end" JSON line and --metrics_out.
  absl::Status Finished(const RunSummary& summary);

 private:
  RunReporter(const ReportOptions& options, int rank, const RunDescription& run,
              DecodeShareSource decode_share)
      : options_(options), rank_(rank), run_(run), decode_share_(std::move(decode_share)) {}

  DecodeShareReport ReadDecodeShare() const {
    return decode_share_ != nullptr ? decode_share_() : DecodeShareReport{};
  }

  ReportOptions options_;
  int rank_;
  RunDescription run_;
  DecodeShareSource decode_share_;
  std::ofstream sample_log_;
  std::ofstream loss_log_;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressPrinter> progress_;

  Clock::time_point run_start_ = Clock::now();
  ThroughputMeter window_;    // since the last progress line
  ThroughputMeter measured_;  // after the warm-up
  int64_t measured_steps_ = 0;
  at::Tensor loss_window_;  // summed step losses since the last progress line
  int64_t loss_window_steps_ = 0;
  double last_loss_ = NAN;
  absl::optional<ValidationScores> last_val_;
  double best_top1_ = -1;
  int64_t best_epoch_ = -1;
  VerdictSummary verdicts_;  // of the traced steps
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_RUN_REPORTER_H_
