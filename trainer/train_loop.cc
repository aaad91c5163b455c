#include "trainer/train_loop.h"

#include <string.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/optional.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "common/trace_events.h"
#include "trainer/checkpoint/run_checkpoints.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/comm/rank_watch.h"
#include "trainer/data_only.h"
#include "trainer/device.h"
#include "trainer/evaluation.h"
#include "trainer/input/decode_share_gauge.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/profiled_steps.h"
#include "trainer/report/run_reporter.h"
#include "trainer/stop_vote.h"
#include "trainer/traced_steps.h"
#include "trainer/training_model.h"

namespace stoker::trainer {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

using Stopped = absl::optional<TrainingOutcome>;  // a run that ends early, or none

// Note [Resuming on another geometry]
// A checkpoint records the position in its epoch as the samples of the epoch's global
// order consumed (RunPosition::samples_done) and the global batch it was trained with. A
// run resumed from it, on any world size, batch size and accumulation, asks every data
// service for the rest of the epoch from that position; each service splits the rest among
// the new ranks as DistributedSampler splits an epoch (Note [The rest of an epoch] in
// data_service/dataset/sampler.h), so every sample not yet trained is trained once, in the
// global order, and every rank agrees on the split because it is a pure function of
// (seed, epoch, position, world size). The rest's batches carry the index an
// uninterrupted run of the new geometry would give them (floor(position / (world x
// batch)) onwards), and a checkpoint written in it records the position in samples again.
//
// The learning-rate schedule is a function of the optimizer step. When the global batch
// (world x batch x accumulation) is unchanged, the run continues at the checkpoint's
// optimizer step: each step is still the same number of samples, and a run of the same
// geometry then continues bit for bit. When it changed, a step is another number of
// samples, so the schedule continues by samples seen: at the step an uninterrupted run of
// the new geometry would have reached, epoch x steps per epoch + position / global batch.
// The schedule's warm-up and decay are set in epochs, so either way it keeps its shape over
// the samples of the run; counting old steps at a new batch would move it ahead or back.

// The input side's GPU decode share as the reports show it.
DecodeShareReport ReportOf(const DecodeShareGauge::Reading& reading) {
  DecodeShareReport report;
  if (reading.mode == DecodeShareMode::kUnset) return report;
  report.mode = DecodeShareModeName(reading.mode);
  report.share = reading.share;
  report.off = reading.mode == DecodeShareMode::kOff;
  report.adaptive = reading.mode == DecodeShareMode::kAdaptive;
  report.settled = reading.settled;
  return report;
}

// Note [Injected step sleep]: for tests only, STOKER_TEST_SLOW_RANK=R:MS makes rank R sleep
// MS milliseconds before each step's forward pass, a straggler whose trace verdict tests
// check (//tests:trace_test). Unset (always, outside tests): no sleep. Returns the
// milliseconds this rank sleeps.
int InjectedStepSleepMs(int rank) {
  const char* value = std::getenv("STOKER_TEST_SLOW_RANK");
  if (value == nullptr) return 0;
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  int slow_rank = -1, ms = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &slow_rank) ||
      !absl::SimpleAtoi(parts[1], &ms) || slow_rank != rank) {
    return 0;
  }
  return ms;
}

// One rank's run. Members are declared in dependency order; the destructor releases them
// in reverse (the input before the model it feeds).
class Trainer {
 public:
  // `decode_share` is where the run's input sets the GPU decode share it uses.
  Trainer(const TrainerOptions& options, const RunContext& context, Communicator& gradients,
          Communicator& host, RunInputFactory open_input, const DecodeShareGauge& decode_share)
      : o_(options),
        context_(context),
        gradients_(gradients),
        host_(host),
        open_input_(std::move(open_input)),
        decode_share_(decode_share),
        injected_sleep_ms_(InjectedStepSleepMs(context.rank.rank)) {}

  absl::StatusOr<TrainingOutcome> Run();

 private:
  absl::Status Resume();
  absl::StatusOr<Stopped> TrainEpoch(int64_t epoch);
  absl::StatusOr<int> NextMicroBatch(int64_t epoch, int64_t index, TrainingBatch* batch,
                                     StepProfiler* profiler);
  absl::Status AfterOptimizerStep(int64_t epoch, int64_t batches_done, int group,
                                  const at::Tensor& loss_sum);
  absl::StatusOr<int> Validate(int64_t epoch);
  absl::StatusOr<std::string> WriteCheckpoint(const RunPosition& position);
  // Waits for the checkpoint write in flight (--checkpoint_async); its error, if it failed.
  absl::Status EndCheckpointWrites();
  absl::StatusOr<TrainingOutcome> Stop(TrainingOutcome::End end, int signal_number,
                                       const RunPosition& position);
  absl::StatusOr<TrainingOutcome> Finish();
  // Where the run stands after the batches of `epoch` before index `batch` (Note
  // [Resuming on another geometry]).
  RunPosition PositionAt(int64_t epoch, int64_t batch) const;
  // The learning-rate schedule's step to continue at (Note [Resuming on another geometry]).
  int64_t ResumedGlobalStep();
  // What traced steps record into; null without --trace.
  TraceRecorder* trace() { return traced_ != nullptr ? traced_->recorder() : nullptr; }

  const TrainerOptions& o_;
  const RunContext& context_;
  Communicator& gradients_;
  Communicator& host_;
  RunInputFactory open_input_;
  const DecodeShareGauge& decode_share_;
  const int injected_sleep_ms_;  // Note [Injected step sleep]
  uint64_t seed_ = 0;
  RunPosition start_;
  absl::optional<RunGeometry> saved_;  // the resumed checkpoint's shape
  std::string checkpoint_source_;      // the resumed checkpoint's name

  std::unique_ptr<RunReporter> reporter_;
  // Rank 0's pinned snapshot memory on a GPU (Note [Snapshot buffers]); before checkpoints_,
  // so that the writer thread has ended (and released its hold) when it is freed.
  std::shared_ptr<SnapshotBuffers> snapshot_buffers_;
  absl::optional<RunCheckpoints> checkpoints_;
  std::unique_ptr<TrainingModel> trained_;
  absl::optional<ProfiledSteps> profiled_;
  std::unique_ptr<TracedSteps> traced_;  // with --trace
  std::unique_ptr<RunInput> input_;
  absl::optional<LearningRateSchedule> schedule_;
  int64_t steps_per_epoch_ = 0;  // optimizer steps

  int64_t global_step_ = 0;
  int64_t steps_this_run_ = 0;
  absl::Status data_error_;  // a data-service failure outside Next(), for the next vote
};

// Rank 0 owns the seed: every rank and so every data service uses its value, unless the
// checkpoint resumed from has its own.
absl::Status Trainer::Resume() {
  int64_t seed = static_cast<int64_t>(o_.seed);
  if (context_.world_size() > 1) RETURN_IF_ERROR(host_.Broadcast(&seed, sizeof(seed), 0));
  seed_ = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(absl::optional<CheckpointReader> checkpoint, checkpoints_->LoadForResume(host_));
  if (!checkpoint.has_value()) return trained_->BroadcastState(gradients_);
  ASSIGN_OR_RETURN(saved_, CheckpointGeometry(*checkpoint));
  ASSIGN_OR_RETURN(start_, CheckpointPosition(*checkpoint));
  checkpoint_source_ = checkpoint->source();
  RETURN_IF_ERROR(CheckResumable(*saved_, start_, GeometryOf(o_, context_.world_size(), seed_),
                                 checkpoint->source()));
  std::string fp8_note;
  RETURN_IF_ERROR(RestoreTrainingState(*checkpoint, trained_->state(), &fp8_note));
  if (!fp8_note.empty()) reporter_->Note(fp8_note);
  if (saved_->seed != seed_ && context_.rank0()) {
    LogWarning("--seed=%d differs from the checkpoint's %d: continuing with the checkpoint's",
               seed_, saved_->seed);
  }
  seed_ = saved_->seed;
  // A checkpoint written after the last batch of an epoch has every sample of that epoch's
  // order trained (the rest is padding or the dropped short batch): the run continues with
  // the next epoch.
  if (saved_->dataset_size > 0 && start_.samples_done >= saved_->dataset_size) {
    ++start_.epoch;
    start_.batches_done = 0;
    start_.samples_done = 0;
  }
  reporter_->Note(absl::StrFormat(
      "resuming from %s: epoch %d, batch %d, step %d (sample %d of the epoch's order, global "
      "batch %d)",
      checkpoint->source(), start_.epoch + 1, start_.batches_done, start_.global_step,
      start_.samples_done, start_.global_batch));
  return absl::OkStatus();
}

absl::StatusOr<TrainingOutcome> Trainer::Run() {
  RETURN_IF_ERROR(CheckPrecisionSupported(o_.device, context_));
  ConfigureDevice(o_.device, context_);
  profiled_.emplace(context_, o_.benchmark.warmup_steps, o_.report.profile_steps,
                    o_.report.kernel_trace, o_.report.kernel_trace_ops);
  ASSIGN_OR_RETURN(trained_, TrainingModel::Create(o_, context_, gradients_));
  const RunDescription run{o_.model.name,          o_.epochs,
                           context_.world_size(),  o_.input.batch_size,
                           o_.input.image_size,    o_.input.synthetic_steps > 0,
                           o_.benchmark.data_only, o_.benchmark.warmup_steps};
  ASSIGN_OR_RETURN(reporter_, RunReporter::Create(o_.report, context_.rank.rank, run, [this] {
                     return ReportOf(decode_share_.Read());
                   }));
  ASSIGN_OR_RETURN(traced_, TracedSteps::Create(o_, context_, host_));
  if (traced_ != nullptr) {
    trained_->step().set_trace(traced_->recorder(), kTrainingTraceThread,
                               traced_->device_timeline(), kGpuTraceThread, kGpuCommTraceThread);
  }
  CheckpointOptions checkpoint_options = o_.checkpoint;
  checkpoint_options.run_identity = RunIdentity(o_);
  ASSIGN_OR_RETURN(RunCheckpoints checkpoints,
                   RunCheckpoints::Open(checkpoint_options, context_.rank0()));
  checkpoints_.emplace(std::move(checkpoints));
  RETURN_IF_ERROR(Resume());
  if (checkpoints_->writes() && context_.use_cuda) {
    // Once, before the first step: the first checkpoint then stalls no more than the others.
    ASSIGN_OR_RETURN(snapshot_buffers_, SnapshotBuffers::Create(trained_->state()));
  }
  global_step_ = start_.global_step;
  if (start_.epoch >= o_.epochs) {
    reporter_->Note(absl::StrCat("the checkpoint is at the end of training (", o_.epochs,
                                 " epochs): nothing to train"));
    return Finish();
  }

  InputStart input_start{start_.epoch, start_.samples_done, seed_};
  if (saved_.has_value()) {
    input_start.check_dataset_size = [this](int64_t dataset_size) {
      return CheckResumableDataset(*saved_, start_, dataset_size, checkpoint_source_);
    };
  }
  ASSIGN_OR_RETURN(input_, open_input_(input_start));
  steps_per_epoch_ = (input_->trained_per_epoch() + o_.step.accumulate - 1) / o_.step.accumulate;
  ASSIGN_OR_RETURN(LearningRateSchedule schedule,
                   LearningRateSchedule::Create(ScheduleOptionsFor(o_, steps_per_epoch_)));
  schedule_.emplace(schedule);
  global_step_ = ResumedGlobalStep();
  EnableAutocast(o_.device, context_);
  reporter_->Starting(input_->batches_per_epoch(), steps_per_epoch_, o_.step.accumulate,
                      o_.optimizer.learning_rate, LrScheduleName(o_.schedule.kind));
  reporter_->StartRun();
  if (o_.benchmark.data_only) {
    RETURN_IF_ERROR(FeedWithoutTraining(*input_, *reporter_, context_, start_.epoch, o_.epochs,
                                        o_.benchmark.warmup_steps));
    return Finish();
  }

  for (int64_t epoch = start_.epoch; epoch < o_.epochs; ++epoch) {
    ASSIGN_OR_RETURN(Stopped stopped, TrainEpoch(epoch));
    if (stopped.has_value()) return *stopped;
    const bool last = epoch + 1 == o_.epochs;
    if (input_->has_validation() && ((epoch + 1) % o_.validation.every == 0 || last)) {
      ASSIGN_OR_RETURN(int stop, Validate(epoch));
      if (stop != 0) return Stop(TrainingOutcome::End::kStopSignal, stop, PositionAt(epoch + 1, 0));
    }
    if (!last && o_.checkpoint.every_epochs > 0 && (epoch + 1) % o_.checkpoint.every_epochs == 0) {
      RETURN_IF_ERROR(WriteCheckpoint(PositionAt(epoch + 1, 0)).status());
    }
  }
  return Finish();
}

int64_t Trainer::ResumedGlobalStep() {
  if (!saved_.has_value() ||
      (saved_->world_size == context_.world_size() && saved_->batch_size == o_.input.batch_size &&
       saved_->accumulate == o_.step.accumulate)) {
    return start_.global_step;
  }
  const int64_t global_batch =
      int64_t{o_.input.batch_size} * context_.world_size() * o_.step.accumulate;
  if (global_batch == start_.global_batch) {
    reporter_->Note(absl::StrCat("the run's batch geometry changed, its global batch of ",
                                 global_batch, " did not: the schedule continues at step ",
                                 start_.global_step));
    return start_.global_step;
  }
  const int64_t step = start_.epoch * steps_per_epoch_ + start_.samples_done / global_batch;
  reporter_->Note(absl::StrCat("the global batch changed from ", start_.global_batch, " to ",
                               global_batch, ": the schedule continues by samples seen, at step ",
                               step));
  return step;
}

RunPosition Trainer::PositionAt(int64_t epoch, int64_t batch) const {
  const int64_t micro_batch = int64_t{o_.input.batch_size} * context_.world_size();
  RunPosition position{epoch, batch, global_step_};
  position.global_batch = micro_batch * o_.step.accumulate;
  if (epoch == start_.epoch && input_ != nullptr) {
    position.samples_done =
        start_.samples_done + (batch - input_->BatchesOf(epoch).first) * micro_batch;
  } else {
    position.samples_done = batch * micro_batch;
  }
  return position;
}

// Trains the rest of `epoch`. Returns an outcome when the run stops inside it.
absl::StatusOr<Stopped> Trainer::TrainEpoch(int64_t epoch) {
  const EpochBatches batches = input_->BatchesOf(epoch);
  const int64_t trained = batches.trained_end;
  int64_t b = batches.first;
  // Ask for the next epoch now, so that its first batches are ready at the boundary. A
  // failure joins the next vote (Note [Stopping together]): the service may be stopping.
  if (epoch + 1 < o_.epochs) data_error_ = input_->PrefetchEpoch(epoch + 1);
  trained_->model().train();
  TrainStep& step = trained_->step();
  while (b < trained) {
    const int group = static_cast<int>(std::min<int64_t>(o_.step.accumulate, trained - b));
    ASSIGN_OR_RETURN(StepProfiler * profiler, profiled_->Start(steps_this_run_, *trained_));
    if (traced_ != nullptr) RETURN_IF_ERROR(traced_->StepStarting(steps_this_run_));
    trained_->SeedRandomOps(seed_, context_.rank.rank, global_step_);
    step.Begin(group);
    at::Tensor loss_sum;
    for (int i = 0; i < group; ++i) {
      TrainingBatch batch;
      ASSIGN_OR_RETURN(int stop, NextMicroBatch(epoch, b + i, &batch, profiler));
      if (stop != 0) return Stop(TrainingOutcome::End::kStopSignal, stop, PositionAt(epoch, b));
      const int64_t compute_start = TraceNowMicros();
      const double comm_before = trained_->allreduce_seconds();
      if (injected_sleep_ms_ > 0) {
        TraceSpan sleep(trace(), kTrainingTraceThread, "injected sleep (test)", "compute");
        std::this_thread::sleep_for(std::chrono::milliseconds(injected_sleep_ms_));
      }
      ASSIGN_OR_RETURN(at::Tensor loss, step.MicroBatch(batch.images, batch.labels, profiler));
      if (traced_ != nullptr) {
        traced_->Computed(compute_start, TraceNowMicros(),
                          trained_->allreduce_seconds() - comm_before);
      }
      RETURN_IF_ERROR(reporter_->LogLoss(epoch, b + i, loss));
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    }
    const int64_t finish_start = TraceNowMicros();
    // The optimizer changes the state only once a checkpoint's copies have read it: a wait
    // on the device, outside the step's graphs (Note [Snapshot buffers]).
    if (snapshot_buffers_ != nullptr) RETURN_IF_ERROR(snapshot_buffers_->GateUpdates());
    RETURN_IF_ERROR(step.Finish(schedule_->At(global_step_), profiler));
    if (traced_ != nullptr) traced_->Computed(finish_start, TraceNowMicros(), 0);
    RETURN_IF_ERROR(profiled_->End(steps_this_run_, *trained_));
    if (traced_ != nullptr) RETURN_IF_ERROR(traced_->StepEnded(steps_this_run_, *reporter_));
    b += group;
    RETURN_IF_ERROR(AfterOptimizerStep(epoch, b, group, loss_sum));
    // A checkpoint write that failed on the writer thread ends the run at this step boundary.
    RETURN_IF_ERROR(checkpoints_->WriteError());
    if (o_.checkpoint.every_steps > 0 && global_step_ % o_.checkpoint.every_steps == 0) {
      RETURN_IF_ERROR(WriteCheckpoint(PositionAt(epoch, b)).status());
    }
    if (o_.checkpoint.stop_after_steps > 0 && steps_this_run_ == o_.checkpoint.stop_after_steps) {
      return Stop(TrainingOutcome::End::kStopAfterSteps, 0, PositionAt(epoch, b));
    }
  }
  // The short last batch (dropped): consumed so that the ring moves on to the next epoch.
  for (; b < batches.end; ++b) {
    TrainingBatch batch;
    ASSIGN_OR_RETURN(int stop, NextMicroBatch(epoch, b, &batch, nullptr));
    if (stop != 0) return Stop(TrainingOutcome::End::kStopSignal, stop, PositionAt(epoch, b));
  }
  return Stopped();
}

// Gets micro-batch `index` of `epoch` and votes (Note [Stopping together]). Returns the
// agreed stop signal, or 0 with `batch` filled.
absl::StatusOr<int> Trainer::NextMicroBatch(int64_t epoch, int64_t index, TrainingBatch* batch,
                                            StepProfiler* profiler) {
  const int64_t next_start = TraceNowMicros();
  absl::StatusOr<TrainingBatch> next = input_->feeder().Next();
  const int64_t next_end = TraceNowMicros();
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kHostToDevice));
  absl::Status local = data_error_.ok() ? next.status() : data_error_;
  data_error_ = absl::OkStatus();
  if (next.ok() && (next->epoch != epoch || next->step != index)) {
    return absl::InternalError(absl::StrCat("the data service delivered epoch ", next->epoch,
                                            " step ", next->step, ", expected ", epoch, " ",
                                            index));
  }
  ASSIGN_OR_RETURN(int stop, AgreeOnStop(host_, local));
  if (stop != 0) return stop;
  if (traced_ != nullptr) {
    traced_->BatchArrived(next->epoch, next->step, next_start, next_end, next->data_wait);
    traced_->Voted(next_end, TraceNowMicros());
  }
  *batch = std::move(*next);
  RETURN_IF_ERROR(profiled_->DataArrived(profiler, batch->data_wait));
  reporter_->AddBatch(epoch, index, batch->data_wait, batch->gpu_input_wait, batch->sample_indices);
  return 0;
}

absl::Status Trainer::AfterOptimizerStep(int64_t epoch, int64_t batches_done, int group,
                                         const at::Tensor& loss_sum) {
  ++global_step_;
  ++steps_this_run_;
  reporter_->AddStep(static_cast<int64_t>(group) * o_.input.batch_size * context_.world_size(),
                     loss_sum.to(at::kFloat) / group, /*first_of_run=*/steps_this_run_ == 1);
  if (steps_this_run_ == o_.benchmark.warmup_steps) {
    if (context_.use_cuda)
      ReportDeviceMemory(o_.device, context_, /*log=*/context_.rank.local_rank == 0);
    // The measured window starts when the device has finished the warm-up steps, not when
    // the host has queued them (it runs several steps ahead), as the Python recipes time.
    RETURN_IF_ERROR(WaitForDevice(context_));
    reporter_->StartMeasuring();
  }
  const int64_t step_in_epoch = (batches_done + o_.step.accumulate - 1) / o_.step.accumulate;
  const bool last_of_epoch = batches_done >= input_->BatchesOf(epoch).trained_end;
  if (step_in_epoch % o_.report.log_every != 0 && !last_of_epoch) return absl::OkStatus();

  // The loss averaged over the window and over ranks: a collective on every rank.
  at::Tensor mean_loss = reporter_->TakeMeanLoss();
  RETURN_IF_ERROR(
      gradients_.AllReduce(mean_loss.data_ptr(), 1, ElementType::kFloat32, ReduceOp::kAverage));
  RETURN_IF_ERROR(gradients_.Synchronize());
  TrainProgress progress;
  progress.epoch = epoch;
  progress.batches_done = batches_done;
  progress.batches_per_epoch = input_->batches_per_epoch();
  progress.global_step = global_step_;
  progress.total_steps = schedule_->total_steps();
  progress.steps_this_run = steps_this_run_;
  progress.loss = mean_loss.item<float>();
  progress.learning_rate = schedule_->At(global_step_ - 1);
  if (trained_->step().grad_norm().defined())
    progress.grad_norm = trained_->step().grad_norm().item<float>();
  if (context_.rank0()) progress.memory = MemoryText(context_);
  return reporter_->Progress(progress);
}

// Validates after `epoch`. Returns the agreed stop signal (0: done).
absl::StatusOr<int> Trainer::Validate(int64_t epoch) {
  TraceSpan span(trace(), kTrainingTraceThread, "validation", "validation");
  const Clock::time_point start = Clock::now();
  absl::StatusOr<ValidationPass> pass = input_->StartValidation(epoch);
  ASSIGN_OR_RETURN(int stop_now, AgreeOnStop(host_, pass.status()));
  if (stop_now != 0) return stop_now;
  // Every rank measures rank 0's running statistics (Note [Running statistics as DDP keeps
  // them], trainer/training_model.cc).
  RETURN_IF_ERROR(trained_->SyncBuffers(gradients_));
  ValidationResult result;
  ASSIGN_OR_RETURN(int stop,
                   RunValidationPass(trained_->model(), *pass, epoch, context_, host_, &result));
  if (stop != 0) return stop;
  reporter_->ExcludeSince(start);
  RETURN_IF_ERROR(reporter_->Validation(epoch, global_step_,
                                        {result.samples, result.top1, result.top5, result.loss},
                                        Seconds(Clock::now() - start)));
  return 0;
}

absl::StatusOr<std::string> Trainer::WriteCheckpoint(const RunPosition& position) {
  // On every rank whenever checkpoints are on (rank 0 alone writes): the saved buffers are
  // those validation measures (Note [Running statistics as DDP keeps them]).
  if (!o_.checkpoint.dir.empty()) RETURN_IF_ERROR(trained_->SyncBuffers(gradients_));
  if (!checkpoints_->writes()) return std::string();
  // Without snapshot buffers the copies wait for the steps queued on the device: those
  // finish first, as their time is training, not the checkpoint's stall. With them nothing
  // waits for the device (Note [Snapshot buffers]).
  if (snapshot_buffers_ == nullptr) RETURN_IF_ERROR(WaitForDevice(context_));
  // One snapshot in host memory at a time: the previous write ends first (Note
  // [Asynchronous checkpoints] in trainer/checkpoint/run_checkpoints.h).
  TraceSpan span(trace(), kTrainingTraceThread, "checkpoint", "checkpoint");
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(checkpoints_->WaitForWrites());
  const Clock::time_point copying = Clock::now();
  RunGeometry geometry = GeometryOf(o_, context_.world_size(), seed_);
  geometry.dataset_size = input_ != nullptr ? input_->dataset_size() : 0;
  ASSIGN_OR_RETURN(CheckpointWriter snapshot,
                   SnapshotCheckpoint(trained_->state(), position, geometry,
                                      /*own_copies=*/o_.checkpoint.async, snapshot_buffers_));
  CheckpointReport report;
  report.bytes = static_cast<int64_t>(snapshot.size());
  ASSIGN_OR_RETURN(report.path, checkpoints_->Save(position.global_step, std::move(snapshot)));
  reporter_->ExcludeSince(start);
  report.epoch = position.epoch;
  report.batches_done = position.batches_done;
  report.global_step = position.global_step;
  report.async = o_.checkpoint.async;
  report.stall = Seconds(Clock::now() - start);
  report.waited = Seconds(copying - start);
  RETURN_IF_ERROR(reporter_->Checkpoint(report));
  return report.path;
}

absl::Status Trainer::EndCheckpointWrites() {
  const Clock::time_point start = Clock::now();
  absl::Status written = checkpoints_->WaitForWrites();
  reporter_->ExcludeSince(start);
  return written;
}

absl::StatusOr<TrainingOutcome> Trainer::Stop(TrainingOutcome::End end, int signal_number,
                                              const RunPosition& position) {
  if (traced_ != nullptr) RETURN_IF_ERROR(traced_->Finish());
  TrainingOutcome outcome;
  outcome.end = end;
  outcome.signal = signal_number;
  absl::StatusOr<std::string> written = WriteCheckpoint(position);
  // The checkpoint is there only once its write has ended.
  if (absl::Status ended = EndCheckpointWrites(); written.ok() && !ended.ok()) written = ended;
  // Every rank waits for rank 0's checkpoint: a rank that exits early with a non-zero code
  // makes mpirun end the others, rank 0 included.
  int64_t ok = written.ok() ? 1 : 0;
  if (context_.world_size() > 1) {
    RETURN_IF_ERROR(host_.Broadcast(&ok, sizeof(ok), 0));
    RETURN_IF_ERROR(host_.Synchronize());
  }
  if (!written.ok()) return written.status();
  if (ok == 0)
    return absl::DataLossError("rank 0 could not write the checkpoint (its log says why)");
  outcome.checkpoint = *written;
  const bool by_signal = end == TrainingOutcome::End::kStopSignal;
  RETURN_IF_ERROR(reporter_->Stopped(
      by_signal ? absl::StrCat("stopped by ", strsignal(signal_number))
                : absl::StrCat("stopped after --stop_after_steps=", o_.checkpoint.stop_after_steps),
      by_signal ? "signal" : "stop_after_steps", position.epoch, position.batches_done,
      input_->batches_per_epoch(), position.global_step, outcome.checkpoint));
  return outcome;
}

absl::StatusOr<TrainingOutcome> Trainer::Finish() {
  RETURN_IF_ERROR(WaitForDevice(context_));
  if (traced_ != nullptr) RETURN_IF_ERROR(traced_->Finish());
  TrainingOutcome outcome;
  const bool trains = !o_.benchmark.data_only;
  if (trains && steps_this_run_ > 0) {
    ASSIGN_OR_RETURN(outcome.checkpoint, WriteCheckpoint(PositionAt(o_.epochs, 0)));
  }
  RETURN_IF_ERROR(EndCheckpointWrites());
  RunSummary summary;
  // Rank 0 exports the buffers every rank validated with; a collective, so on every rank.
  if (trains && !o_.report.export_path.empty()) RETURN_IF_ERROR(trained_->SyncBuffers(gradients_));
  if (context_.rank0() && trains && !o_.report.export_path.empty()) {
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(trained_->ExportWeights(o_.report.export_path, o_.checkpoint.file_mode));
    reporter_->ExcludeSince(start);  // writing the weights is not training
    summary.exported = o_.report.export_path;
  }
  summary.global_step = global_step_;
  summary.steps_this_run = steps_this_run_;
  summary.loss_scaling = trained_->scaler().enabled();
  summary.loss_scale = trained_->scaler().scale();
  summary.skipped_steps = trained_->step().skipped_steps();
  if (trained_->step().graphs_captured() > 0) {
    reporter_->Note(absl::StrFormat("CUDA graphs: %d captured, %d replays",
                                    trained_->step().graphs_captured(),
                                    trained_->step().replays()));
  }
  summary.profiler = profiled_->profiler();
  RETURN_IF_ERROR(reporter_->Finished(summary));
  if (context_.use_cuda)
    ReportDeviceMemory(o_.device, context_, /*log=*/context_.rank.local_rank == 0);
  if (!o_.report.final_params_out.empty()) {
    RETURN_IF_ERROR(
        trained_->WriteParameters(RankFilePath(o_.report.final_params_out, context_.rank.rank)));
  }
  return outcome;
}

}  // namespace

int ExitCodeFor(const TrainingOutcome& outcome) {
  switch (outcome.end) {
    case TrainingOutcome::End::kFinished:
      return kExitOk;
    case TrainingOutcome::End::kStopSignal:
      return ExitCodeForSignal(outcome.signal);
    case TrainingOutcome::End::kStopAfterSteps:
      return kExitStoppedEarly;
  }
  return kExitError;
}

absl::StatusOr<TrainingOutcome> RunTraining(const TrainerOptions& options,
                                            const RunContext& context, Communicator& gradients,
                                            Communicator& host, RunInputFactory open_input) {
  RETURN_IF_ERROR(ValidateOptions(options));
  DecodeShareGauge decode_share;
  if (open_input == nullptr) {
    open_input = [&](const InputStart& start) {
      return OpenRunInput(options, context, start, &decode_share);
    };
  }
  // Every collective gets a deadline (Note [Collective deadline] in
  // trainer/comm/collective_watchdog.h).
  ASSIGN_OR_RETURN(
      std::unique_ptr<RankWatch> watch,
      WatchRank(options.comm, context.rank, context.job_id, host, {&gradients, &host}));
  Trainer trainer(options, context, gradients, host, std::move(open_input), decode_share);
  return TorchCall("training", [&] { return trainer.Run(); });
}

}  // namespace stoker::trainer
