#include "trainer/report/run_reporter.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/names.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

double UnixSeconds() { return absl::ToUnixMicros(absl::Now()) / 1e6; }

double Seconds(RunReporter::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool ProgressInPlace(ProgressMode mode) {
  if (mode != ProgressMode::kAuto) return mode == ProgressMode::kInPlace;
  const char* env = std::getenv("STOKER_PROGRESS_IN_PLACE");
  return isatty(STDERR_FILENO) != 0 || (env != nullptr && std::string(env) == "1");
}

// Adds the fields that end the "train" and "end" records, in this order.
// A negative gpu_input_wait_share (not measured) is left out.
JsonObject& AddRatesAndTime(JsonObject& record, double images_per_second, double data_wait_share,
                            double gpu_input_wait_share, double elapsed_s) {
  record.Add("images_per_second", images_per_second).Add("data_wait_share", data_wait_share);
  if (gpu_input_wait_share >= 0) record.Add("gpu_input_wait_share", gpu_input_wait_share);
  return record.Add("elapsed_s", elapsed_s).Add("time", UnixSeconds());
}

// Writes each (tag, value) of `scalars`, in order, at `step`.
absl::Status AddScalars(TensorBoardWriter& writer,
                        std::initializer_list<std::pair<absl::string_view, double>> scalars,
                        int64_t step) {
  for (const auto& [tag, value] : scalars) RETURN_IF_ERROR(writer.AddScalar(tag, value, step));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunReporter>> RunReporter::Create(const ReportOptions& options,
                                                                 int rank,
                                                                 const RunDescription& run,
                                                                 DecodeShareSource decode_share) {
  std::unique_ptr<RunReporter> reporter(
      new RunReporter(options, rank, run, std::move(decode_share)));
  if (!options.sample_log.empty()) {
    const std::string path = RankFilePath(options.sample_log, rank);
    reporter->sample_log_.open(path, std::ios::trunc);
    if (!reporter->sample_log_)
      return absl::InvalidArgumentError(absl::StrCat("--sample_log: cannot write ", path));
  }
  if (rank != 0) return reporter;
  reporter->progress_ =
      std::make_unique<ProgressPrinter>(stderr, ProgressInPlace(options.progress));
  if (!options.loss_log.empty()) {
    reporter->loss_log_.open(options.loss_log, std::ios::trunc);
    if (!reporter->loss_log_) {
      return absl::InvalidArgumentError(
          absl::StrCat("--loss_log: cannot write ", options.loss_log));
    }
  }
  if (!options.metrics_jsonl.empty()) {
    ASSIGN_OR_RETURN(reporter->jsonl_, JsonlWriter::Open(options.metrics_jsonl));
  }
  if (!options.tensorboard_dir.empty()) {
    ASSIGN_OR_RETURN(reporter->tensorboard_, TensorBoardWriter::Create(options.tensorboard_dir));
  }
  return reporter;
}

void RunReporter::StartRun() {
  run_start_ = Clock::now();
  window_.Restart(run_start_);
  measured_.Restart(run_start_);
  measured_steps_ = 0;
}

void RunReporter::StartMeasuring() {
  measured_.Restart();
  measured_steps_ = 0;
}

void RunReporter::ExcludeSince(Clock::time_point since) {
  const Clock::duration paused = Clock::now() - since;
  window_.Exclude(paused);
  measured_.Exclude(paused);
}

void RunReporter::AddBatch(int64_t epoch, int64_t index, absl::Duration data_wait,
                           std::optional<absl::Duration> gpu_input_wait,
                           const std::vector<int64_t>& samples) {
  window_.AddDataWait(data_wait);
  measured_.AddDataWait(data_wait);
  if (gpu_input_wait.has_value()) {
    window_.AddGpuInputWait(*gpu_input_wait);
    measured_.AddGpuInputWait(*gpu_input_wait);
  }
  if (!sample_log_.is_open()) return;
  sample_log_ << epoch << " " << index;
  for (int64_t sample : samples) sample_log_ << " " << sample;
  // Flushed line by line, as --loss_log is: a killed rank's log still holds every batch it
  // took.
  sample_log_ << "\n" << std::flush;
}

absl::Status RunReporter::LogLoss(int64_t epoch, int64_t index, const at::Tensor& loss) {
  if (!loss_log_.is_open()) return absl::OkStatus();
  loss_log_ << absl::StrFormat("%d %d %.9g\n", epoch, index, loss.item<float>()) << std::flush;
  return absl::OkStatus();
}

void RunReporter::AddStep(int64_t images, const at::Tensor& step_loss, bool first_of_run) {
  if (first_of_run) run_start_ = Clock::now();
  window_.AddImages(images);
  measured_.AddImages(images);
  ++measured_steps_;
  if (!step_loss.defined()) return;
  loss_window_ = loss_window_.defined() ? loss_window_ + step_loss : step_loss;
  ++loss_window_steps_;
}

at::Tensor RunReporter::TakeMeanLoss() {
  at::Tensor mean = (loss_window_ / loss_window_steps_).reshape({1}).contiguous();
  loss_window_ = at::Tensor();
  loss_window_steps_ = 0;
  return mean;
}

absl::Status RunReporter::Progress(const TrainProgress& p) {
  last_loss_ = p.loss;
  if (!rank0()) return absl::OkStatus();
  const Clock::time_point now = Clock::now();
  const double images_per_second = window_.ImagesPerSecond(now);
  const double data_wait = window_.DataWaitShare(now, /*capped=*/true);
  const double gpu_input_wait = window_.GpuInputWaitShare(now);
  window_.Restart(now);
  double eta = -1;
  if (p.steps_this_run > 1) {
    eta = Seconds(now - run_start_) / (p.steps_this_run - 1) *
          std::max<int64_t>(0, p.total_steps - p.global_step);
  }
  ProgressSnapshot snapshot;
  snapshot.epoch = static_cast<int>(p.epoch + 1);
  snapshot.epochs = run_.epochs;
  snapshot.step = p.batches_done;
  snapshot.steps_per_epoch = p.batches_per_epoch;
  snapshot.loss = p.loss;
  snapshot.learning_rate = p.learning_rate;
  snapshot.images_per_second = images_per_second;
  snapshot.data_wait_share = data_wait;
  snapshot.gpu_input_wait_share = gpu_input_wait;
  snapshot.memory = p.memory;
  snapshot.eta_seconds = eta;
  const DecodeShareReport share = ReadDecodeShare();
  // The progress line shows the share only where some of it may be decoded on the GPU.
  const bool share_shown = !share.mode.empty();
  if (share_shown && !share.off) snapshot.gpu_decode_share = share.share;
  if (verdicts_.steps() > 0) snapshot.bound = StepBoundName(verdicts_.bound());
  progress_->Update(FormatProgressLine(snapshot));
  const bool has_norm = !std::isnan(p.grad_norm);
  if (jsonl_ != nullptr) {
    JsonObject record;
    record.Add("type", "train")
        .Add("epoch", p.epoch + 1)
        .Add("step", p.batches_done)
        .Add("steps_per_epoch", p.batches_per_epoch)
        .Add("global_step", p.global_step)
        .Add("loss", p.loss)
        .Add("lr", p.learning_rate);
    AddRatesAndTime(record, images_per_second, data_wait, gpu_input_wait,
                    Seconds(now - run_start_));
    if (has_norm) record.Add("grad_norm", p.grad_norm);
    if (share_shown) {
      record.Add("gpu_decode_share", share.share).Add("gpu_decode_mode", share.mode);
    }
    RETURN_IF_ERROR(jsonl_->Write(record));
  }
  if (tensorboard_ != nullptr) {
    RETURN_IF_ERROR(AddScalars(*tensorboard_,
                               {{"train/loss", p.loss},
                                {"train/lr", p.learning_rate},
                                {"train/images_per_second", images_per_second},
                                {"train/data_wait_share", data_wait}},
                               p.global_step));
    if (gpu_input_wait >= 0) {
      RETURN_IF_ERROR(
          tensorboard_->AddScalar("train/gpu_input_wait_share", gpu_input_wait, p.global_step));
    }
    if (share_shown) {
      RETURN_IF_ERROR(
          tensorboard_->AddScalar("train/gpu_decode_share", share.share, p.global_step));
    }
    if (has_norm)
      RETURN_IF_ERROR(tensorboard_->AddScalar("train/grad_norm", p.grad_norm, p.global_step));
  }
  return absl::OkStatus();
}

void RunReporter::Starting(int64_t batches_per_epoch, int64_t steps_per_epoch, int accumulate,
                           double learning_rate, absl::string_view schedule) {
  Note(absl::StrFormat(
      "training %s: %d epochs of %d batches (%d optimizer steps each) on %d rank(s), batch %d x "
      "%d%s, lr %g (%s)",
      run_.model, run_.epochs, batches_per_epoch, steps_per_epoch, run_.world_size, run_.batch_size,
      accumulate, accumulate > 1 ? " (accumulated)" : "", learning_rate, schedule));
}

absl::Status RunReporter::TraceVerdict(const StepVerdict& v) {
  verdicts_.Add(v);
  if (!rank0()) return absl::OkStatus();
  Note(v.text);
  if (jsonl_ == nullptr) return absl::OkStatus();
  JsonObject record;
  record.Add("type", "trace_step")
      .Add("step", v.step)
      .Add("bound", StepBoundName(v.bound))
      .Add("step_ms", v.step_ms)
      .Add("median_ms", v.median_ms)
      .Add("stage", v.stage)
      .Add("stage_ms", v.stage_ms);
  if (v.rank >= 0) {
    record.Add("rank", v.rank)
        .Add("host", v.host)
        .Add("node", v.node)
        .Add("excess_ms", v.excess_ms)
        .Add("others_comm_ms", v.others_comm_ms);
  }
  record.Add("text", v.text);
  return jsonl_->Write(record);
}

void RunReporter::Note(const std::string& line) {
  if (!rank0()) return;
  progress_->Finish();
  LogInfo("%s", line);
}

absl::Status RunReporter::Validation(int64_t epoch, int64_t global_step,
                                     const ValidationScores& scores, double seconds) {
  last_val_ = scores;
  if (scores.top1 > best_top1_) {
    best_top1_ = scores.top1;
    best_epoch_ = epoch + 1;
  }
  if (!rank0()) return absl::OkStatus();
  Note(absl::StrFormat(
      "validation after epoch %d: top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%d samples, %.1f s)",
      epoch + 1, 100 * scores.top1, 100 * scores.top5, scores.loss, scores.samples, seconds));
  if (jsonl_ != nullptr) {
    RETURN_IF_ERROR(jsonl_->Write(JsonObject()
                                      .Add("type", "val")
                                      .Add("epoch", epoch + 1)
                                      .Add("global_step", global_step)
                                      .Add("top1", scores.top1)
                                      .Add("top5", scores.top5)
                                      .Add("loss", scores.loss)
                                      .Add("samples", scores.samples)
                                      .Add("time", UnixSeconds())));
  }
  if (tensorboard_ != nullptr) {
    RETURN_IF_ERROR(AddScalars(
        *tensorboard_,
        {{"val/top1", scores.top1}, {"val/top5", scores.top5}, {"val/loss", scores.loss}},
        global_step));
  }
  return absl::OkStatus();
}

absl::Status RunReporter::Checkpoint(const CheckpointReport& c) {
  if (!rank0()) return absl::OkStatus();
  if (c.async) {
    Note(absl::StrFormat(
        "checkpoint %s (epoch %d, batch %d, step %d; %.1f MB; the step waited %.3f s for the "
        "copy to host memory; writing in the background)",
        c.path, c.epoch + 1, c.batches_done, c.global_step, c.bytes / 1e6, c.stall));
  } else {
    Note(absl::StrFormat("checkpoint %s (epoch %d, batch %d, step %d; %.1f MB in %.2f s)", c.path,
                         c.epoch + 1, c.batches_done, c.global_step, c.bytes / 1e6, c.stall));
  }
  if (c.waited >= 0.001) {
    Note(absl::StrFormat(
        "the checkpoint at step %d first waited %.3f s for the previous checkpoint's write to "
        "end (one write in flight at a time: checkpoints come faster than they are written)",
        c.global_step, c.waited));
  }
  if (jsonl_ == nullptr) return absl::OkStatus();
  return jsonl_->Write(JsonObject()
                           .Add("type", "checkpoint")
                           .Add("path", c.path)
                           .Add("epoch", c.epoch + 1)
                           .Add("step", c.batches_done)
                           .Add("global_step", c.global_step)
                           .Add("bytes", c.bytes)
                           .Add("async", c.async)
                           .Add("stall_s", c.stall)
                           .Add("waited_s", c.waited)
                           .Add("time", UnixSeconds()));
}

absl::Status RunReporter::Stopped(const std::string& why, const std::string& reason, int64_t epoch,
                                  int64_t batches_done, int64_t batches_per_epoch,
                                  int64_t global_step, const std::string& checkpoint) {
  if (!rank0()) return absl::OkStatus();
  progress_->Finish();
  LogInfo("%s at epoch %d, batch %d of %d (step %d)%s", why, epoch + 1, batches_done,
          batches_per_epoch, global_step,
          checkpoint.empty() ? "; no checkpoint (no --checkpoint_dir)"
                             : absl::StrCat("; resume with --resume=auto (", checkpoint, ")"));
  if (jsonl_ == nullptr) return absl::OkStatus();
  return jsonl_->Write(JsonObject()
                           .Add("type", "stop")
                           .Add("reason", reason)
                           .Add("epoch", epoch + 1)
                           .Add("step", batches_done)
                           .Add("global_step", global_step)
                           .Add("checkpoint", checkpoint));
}

absl::Status RunReporter::Finished(const RunSummary& s) {
  if (!rank0()) return absl::OkStatus();
  const Clock::time_point now = Clock::now();
  const double images_per_second = measured_.ImagesPerSecond(now);
  const double data_wait_share = measured_.DataWaitShare(now);
  const double gpu_input_wait_share = measured_.GpuInputWaitShare(now);
  const bool profiled = s.profiler != nullptr && s.profiler->steps() > 0;
  progress_->Finish();
  LogInfo(
      "done: %d epochs, %d optimizer steps (%d in this run); %.1f images/s over %d ranks after "
      "%d warm-up steps; data wait %.1f%% of the time%s",
      run_.epochs, s.global_step, s.steps_this_run, images_per_second, run_.world_size,
      run_.warmup_steps, 100 * data_wait_share,
      gpu_input_wait_share < 0
          ? ""
          : absl::StrFormat(" (the GPU's wait for input: %.1f%%)", 100 * gpu_input_wait_share));
  if (s.loss_scaling) {
    LogInfo("fp16 loss scale %.0f; %d step(s) skipped for inf/NaN gradients", s.loss_scale,
            static_cast<int>(s.skipped_steps));
  }
  if (last_val_.has_value()) {
    LogInfo(
        "validation: final top-1 %.2f%%, top-5 %.2f%% (%d samples); best top-1 %.2f%% after epoch "
        "%d",
        100 * last_val_->top1, 100 * last_val_->top5, last_val_->samples, 100 * best_top1_,
        best_epoch_);
  }
  const DecodeShareReport share = ReadDecodeShare();
  const bool share_shown = !share.mode.empty();
  if (share_shown) {
    LogInfo("GPU decode share %.3f (%s%s)", share.share, share.mode,
            !share.adaptive ? ""
            : share.settled ? ", settled"
                            : ", not settled yet");
  }
  if (profiled) LogInfo("%s", s.profiler->Report());
  if (!s.exported.empty()) LogInfo("exported the model's state dict to %s", s.exported);
  if (verdicts_.steps() > 0) {
    LogInfo("%s", verdicts_.Text());
    if (jsonl_ != nullptr) {
      JsonObject record;
      record.Add("type", "trace_verdict")
          .Add("steps", verdicts_.steps())
          .Add("bound", StepBoundName(verdicts_.bound()));
      if (verdicts_.culprit_rank() >= 0) {
        record.Add("rank", verdicts_.culprit_rank())
            .Add("stage", verdicts_.culprit_stage())
            .Add("excess_ms", verdicts_.culprit_excess_ms());
      }
      record.Add("text", verdicts_.Text());
      RETURN_IF_ERROR(jsonl_->Write(record));
    }
  }
  if (jsonl_ != nullptr) {
    JsonObject record;
    record.Add("type", "end").Add("epochs", run_.epochs).Add("global_step", s.global_step);
    AddRatesAndTime(record, images_per_second, data_wait_share, gpu_input_wait_share,
                    Seconds(now - run_start_));
    if (last_val_.has_value()) {
      record.Add("val_top1", last_val_->top1)
          .Add("val_top5", last_val_->top5)
          .Add("best_top1", best_top1_);
    }
    if (share_shown) {
      record.Add("gpu_decode_share", share.share)
          .Add("gpu_decode_mode", share.mode)
          .Add("gpu_decode_settled", share.settled);
    }
    RETURN_IF_ERROR(jsonl_->Write(record));
  }
  if (options_.metrics_out.empty()) return absl::OkStatus();
  std::ofstream out(options_.metrics_out, std::ios::trunc);
  JsonObject summary;
  summary.Add("model", run_.model)
      .Add("world_size", run_.world_size)
      .Add("batch_size", run_.batch_size)
      .Add("image_size", run_.image_size)
      .Add("synthetic", run_.synthetic)
      .Add("images_per_second", images_per_second)
      .Add("data_wait_share", data_wait_share);
  if (gpu_input_wait_share >= 0) summary.Add("gpu_input_wait_share", gpu_input_wait_share);
  summary.Add("data_only", run_.data_only)
      .Add("measured_steps", measured_steps_)
      .Add("global_step", s.global_step)
      .Add("final_loss", last_loss_);
  if (share_shown) {
    summary.Add("gpu_decode_share", share.share)
        .Add("gpu_decode_mode", share.mode)
        .Add("gpu_decode_settled", share.settled);
  }
  if (last_val_.has_value()) {
    summary.Add("val_top1", last_val_->top1)
        .Add("val_top5", last_val_->top5)
        .Add("val_samples", last_val_->samples);
  }
  if (profiled) {
    for (int p = 0; p < kStepPhaseCount; ++p) {
      const StepPhase phase = static_cast<StepPhase>(p);
      summary.Add(absl::StrCat("profile_", StepPhaseName(phase), "_ms"),
                  1e3 * s.profiler->MeanSeconds(phase));
    }
  }
  out << summary.Build() << "\n";
  if (!out)
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_out: cannot write ", options_.metrics_out));
  return absl::OkStatus();
}

}  // namespace stoker::trainer
