#include "trainer/train_loop.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data_service/ring/ring_client.h"
#include "trainer/atomic_file.h"
#include "trainer/batch_feeder.h"
#include "trainer/checkpoint_file.h"
#include "trainer/collective_watchdog.h"
#include "trainer/evaluation.h"
#include "trainer/fused_optimizer.h"
#include "trainer/grad_buckets.h"
#include "trainer/lr_schedule.h"
#include "trainer/models.h"
#include "trainer/nn/loss_scaler.h"
#include "trainer/nn/state_dict.h"
#include "trainer/node_progress_table.h"
#include "trainer/progress.h"
#include "trainer/step_profiler.h"
#include "trainer/stop_signal.h"
#include "trainer/tensorboard_writer.h"
#include "trainer/train_step.h"
#include "trainer/training_state.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "trainer/cuda_batch_feeder.h"
#endif

namespace stoker::trainer {
namespace {

using data_service::BatchView;
using data_service::EpochInfo;
using data_service::RingClient;
using data_service::RingRequest;
using launcher::RankInfo;

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Note [Stopping together]
// A stop signal reaches the ranks at slightly different times, and a rank may be blocked
// waiting for its next batch when it comes (the data service may be stopping too). So every
// rank first tries to get its next micro-batch, then all ranks vote (one host allreduce of
// three counters: SIGINT seen, SIGTERM seen, no batch). Any stop vote stops every rank
// before it trains that batch, so all of them end after the same optimizer step, with the
// same state, and rank 0's checkpoint of that state is the run's. A rank without a batch
// and without a stop vote fails the step on every rank. Partial gradient accumulation is
// discarded: the checkpoint's position is the start of the interrupted optimizer step.

// How long a rank whose data service is gone waits for a stop signal before it calls
// that a failure: when a job is stopped, the data service may get its SIGTERM (and exit)
// before the trainers get theirs (mpirun passes SIGTERM on after a second).
constexpr absl::Duration kStopSignalGrace = absl::Seconds(5);

// The agreed outcome of a vote: 0 to go on, or the stop signal.
absl::StatusOr<int> AgreeOnStop(Communicator& host, const absl::Status& local) {
  if (absl::IsUnavailable(local) && StopSignalReceived() == 0) {
    const absl::Time deadline = absl::Now() + kStopSignalGrace;
    while (StopSignalReceived() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  }
  // One counter per stop signal (in order of precedence), then "no batch".
  constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR2, SIGUSR1};
  const int received = StopSignalReceived();
  int64_t votes[5] = {};
  for (int i = 0; i < 4; ++i) votes[i] = received == kSignals[i] ? 1 : 0;
  votes[4] = local.ok() ? 0 : 1;
  if (host.world_size() > 1) {
    RETURN_IF_ERROR(host.AllReduce(votes, 5, ElementType::kInt64, ReduceOp::kSum));
    RETURN_IF_ERROR(host.Synchronize());
  }
  for (int i = 0; i < 4; ++i) {
    if (votes[i] == 0) continue;
    if (!local.ok()) LogWarning("stopping; this rank had no next batch: %s", local.message());
    return kSignals[i];
  }
  if (!local.ok()) return local;
  if (votes[4] > 0) {
    return absl::UnavailableError("another rank could not get its next batch (its log says why)");
  }
  return 0;
}

// Same weights and buffers on every rank before the first step, as DDP does.
absl::Status BroadcastModelState(ImageClassifier& model, Communicator& communicator) {
  c10::NoGradGuard no_grad;
  for (at::Tensor& p : model.parameters()) {
    RETURN_IF_ERROR(communicator.Broadcast(p.data_ptr(), p.nbytes(), 0));
  }
  for (at::Tensor& b : model.buffers()) {
    RETURN_IF_ERROR(communicator.Broadcast(b.data_ptr(), b.nbytes(), 0));
  }
  return communicator.Synchronize();
}

absl::Status WriteParameters(ImageClassifier& model, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  for (const at::Tensor& p : model.parameters()) {
    at::Tensor host = p.detach().to(at::kCPU).contiguous();
    out.write(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

// Replays one batch made on the device: the GPU-bound ceiling, with no data service.
class FixedBatchFeeder final : public BatchFeeder {
 public:
  FixedBatchFeeder(TrainingBatch batch, int steps_per_epoch, int64_t first_batch)
      : batch_(std::move(batch)), steps_per_epoch_(steps_per_epoch), next_(first_batch) {}
  absl::StatusOr<TrainingBatch> Next() override {
    TrainingBatch batch = batch_;
    batch.epoch = next_ / steps_per_epoch_;
    batch.step = next_ % steps_per_epoch_;
    ++next_;
    return batch;
  }

 private:
  TrainingBatch batch_;
  int steps_per_epoch_;
  int64_t next_;
};

// A resumed run restarts the data service's epoch from its first batch: acquire and
// release the batches the run had already consumed (the ring delivers in order, and the
// batches are a pure function of seed, epoch and index, so the rest are the same batches).
class SkippingBatchSource final : public BatchSource {
 public:
  SkippingBatchSource(BatchSource* inner, int64_t epoch, int64_t skip)
      : inner_(inner), epoch_(epoch), skip_(skip) {}
  absl::StatusOr<BatchView> Acquire(absl::Duration timeout) override {
    while (true) {
      ASSIGN_OR_RETURN(BatchView view, inner_->Acquire(timeout));
      if (view.epoch != epoch_ || view.step >= skip_) return view;
      RETURN_IF_ERROR(inner_->Release(view));
    }
  }
  absl::Status Release(const BatchView& batch) override { return inner_->Release(batch); }
  void* memory_base() const override { return inner_->memory_base(); }
  size_t memory_bytes() const override { return inner_->memory_bytes(); }

 private:
  BatchSource* inner_;
  int64_t epoch_;
  int64_t skip_;
};

at::ScalarType InputType(const TrainerOptions& o) {
  if (!o.use_cuda || o.precision == Precision::kFloat32) return at::kFloat;
  return o.precision == Precision::kBFloat16 ? at::kBFloat16 : at::kHalf;
}

// Waits until this rank's GPU has finished all queued work (no-op on the CPU).
absl::Status WaitForDevice(const TrainerOptions& o) {
#ifdef STOKER_WITH_CUDA
  if (o.use_cuda) return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
  return absl::OkStatus();
}

// Device memory, as the article asks to watch it: what tensors hold, what the caching
// allocator keeps, the peak. Releases cached blocks past the configured share.
void ReportDeviceMemory(const TrainerOptions& o, const RankInfo& rank, bool log) {
#ifdef STOKER_WITH_CUDA
  if (!o.use_cuda) return;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(o.cuda_device);
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const double gib = 1024.0 * 1024 * 1024;
  const double allocated = stats.allocated_bytes[aggregate].current / gib;
  const double reserved = stats.reserved_bytes[aggregate].current / gib;
  const double peak = stats.allocated_bytes[aggregate].peak / gib;
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  if (log) {
    LogInfo("rank %d GPU %d memory: allocated %.2f GiB, reserved %.2f GiB, peak %.2f GiB of %.1f GiB",
            rank.rank, o.cuda_device, allocated, reserved, peak, total_bytes / gib);
  }
  if (reserved * gib > o.cache_release_fraction * total_bytes) {
    LogWarning("reserved device memory passed %.0f%% of the GPU: releasing cached blocks",
               o.cache_release_fraction * 100);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#else
  (void)o, (void)rank, (void)log;
#endif
}

// For the progress line: the GPU's peak allocation, or the process's resident set.
std::string MemoryText(const TrainerOptions& o) {
#ifdef STOKER_WITH_CUDA
  if (o.use_cuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(o.cuda_device);
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const double gib = 1024.0 * 1024 * 1024;
    return absl::StrFormat("GPU %.1f GiB (peak %.1f)", stats.allocated_bytes[aggregate].current / gib,
                           stats.allocated_bytes[aggregate].peak / gib);
  }
#endif
  (void)o;
  const double rss = ResidentSetGiB();
  return rss >= 0 ? absl::StrFormat("RSS %.2f GiB", rss) : "";
}

double UnixSeconds() { return absl::ToUnixMicros(absl::Now()) / 1e6; }

// Picks the checkpoint to resume from (rank 0) and hands its bytes to every rank.
absl::StatusOr<absl::optional<CheckpointReader>> LoadResumeCheckpoint(const TrainerOptions& o,
                                                                      const RankInfo& rank,
                                                                      Communicator& host) {
  int64_t size = -1;
  absl::optional<CheckpointReader> checkpoint;
  if (rank.rank == 0 && o.resume != "none") {
    if (o.resume == "auto") {
      if (!o.checkpoint_dir.empty()) {
        std::vector<std::string> skipped;
        ASSIGN_OR_RETURN(checkpoint, LoadNewestValidCheckpoint(o.checkpoint_dir, &skipped));
        for (const std::string& why : skipped) {
          LogWarning("skipping an invalid checkpoint: %s", why);
        }
        if (!checkpoint.has_value() && !skipped.empty()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "--resume=auto: no valid checkpoint in ", o.checkpoint_dir, " (", skipped.size(),
              " invalid; see above). Pass --resume=none to start afresh"));
        }
      }
    } else {
      absl::StatusOr<CheckpointReader> loaded = LoadCheckpoint(o.resume);
      if (!loaded.ok()) {
        return absl::Status(loaded.status().code(), absl::StrCat("--resume=", o.resume, ": ",
                                                                 loaded.status().message()));
      }
      checkpoint = std::move(*loaded);
    }
    if (checkpoint.has_value()) size = static_cast<int64_t>(checkpoint->bytes().size());
  }
  if (rank.world_size > 1) {
    RETURN_IF_ERROR(host.Broadcast(&size, sizeof(size), 0));
    if (size >= 0) {
      std::string bytes;
      if (rank.rank == 0) {
        RETURN_IF_ERROR(host.Broadcast(const_cast<char*>(checkpoint->bytes().data()), size, 0));
      } else {
        bytes.resize(static_cast<size_t>(size));
        RETURN_IF_ERROR(host.Broadcast(bytes.data(), size, 0));
        ASSIGN_OR_RETURN(CheckpointReader parsed, CheckpointReader::Parse(std::move(bytes), "the checkpoint from rank 0"));
        checkpoint = std::move(parsed);
      }
    }
    RETURN_IF_ERROR(host.Synchronize());
  }
  return checkpoint;
}

// One rank's run. Members are declared in dependency order (rings before what reads
// them); the destructor releases them in reverse.
class Trainer {
 public:
  Trainer(const TrainerOptions& options, const RankInfo& rank, Communicator& communicator,
          Communicator& host)
      : o_(options),
        rank_(rank),
        communicator_(communicator),
        host_(host),
        device_(options.use_cuda ? at::Device(at::kCUDA, options.cuda_device) : at::Device(at::kCPU)) {}

  absl::StatusOr<TrainingOutcome> Run();

 private:
  absl::Status SetUpModel();
  absl::Status SetUpOutputs();
  absl::Status SetUpData();
  absl::Status SetUpFeeder();
  absl::StatusOr<absl::optional<TrainingOutcome>> TrainEpoch(int64_t epoch);
  absl::StatusOr<int> NextMicroBatch(int64_t epoch, int64_t index, TrainingBatch* batch);
  absl::StatusOr<int> Validate(int64_t epoch);
  absl::Status AfterOptimizerStep(int64_t epoch, int64_t batches_done, int group, const at::Tensor& loss_sum);
  absl::StatusOr<std::string> WriteCheckpoint(const RunPosition& position);
  absl::StatusOr<TrainingOutcome> Stop(TrainingOutcome::End end, int signal_number, const RunPosition& position);
  absl::StatusOr<absl::optional<TrainingOutcome>> StopInEpoch(TrainingOutcome::End end, int signal_number,
                                                              const RunPosition& position) {
    ASSIGN_OR_RETURN(TrainingOutcome outcome, Stop(end, signal_number, position));
    return absl::optional<TrainingOutcome>(std::move(outcome));
  }
  absl::StatusOr<TrainingOutcome> Finish();
  absl::StatusOr<TrainingOutcome> DataOnly();
  RunGeometry Geometry() const;
  bool rank0() const { return rank_.rank == 0; }
  void Note(const std::string& line);  // rank 0: a log line that does not break the progress line
  void ExcludeFromThroughput(Clock::time_point since);

  const TrainerOptions& o_;
  const RankInfo& rank_;
  Communicator& communicator_;
  Communicator& host_;
  const at::Device device_;
  uint64_t seed_ = 0;

  // Model and optimisation.
  std::shared_ptr<ImageClassifier> model_;
  std::vector<at::Tensor> parameters_;       // registration order
  std::vector<std::string> names_;
  std::vector<std::string> optimizer_names_;  // the optimizer's order (its groups)
  std::unique_ptr<TimedCommunicator> timed_;  // CPU profiling: time inside the allreduces
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<FusedOptimizer> optimizer_;
  absl::optional<LossScaler> scaler_;
  std::unique_ptr<TrainStep> step_;
  absl::optional<LearningRateSchedule> schedule_;
  bool autocast_ = false;

  // Data. Declared in dependency order: the feeder reads the sources, which read the rings.
  std::unique_ptr<RingClient> ring_;
  std::unique_ptr<RingClient> val_ring_;
  std::unique_ptr<BatchSource> ring_source_;
  std::unique_ptr<BatchSource> source_;  // ring_source_, skipping on resume
  std::unique_ptr<BatchFeeder> feeder_;
  FeederOptions feeder_options_;
  int64_t batches_per_epoch_ = 0;   // as delivered
  int64_t trained_per_epoch_ = 0;   // without the short last batch when it is dropped
  int64_t steps_per_epoch_ = 0;     // optimizer steps

  // Position.
  RunPosition start_;
  bool resumed_ = false;
  int64_t global_step_ = 0;
  int64_t steps_this_run_ = 0;
  absl::Status data_error_;  // a data-service failure outside Next(), for the next vote

  // Reporting (rank 0).
  std::ofstream loss_log_;
  std::ofstream sample_log_;  // every rank
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressPrinter> progress_;
  std::unique_ptr<StepProfiler> profiler_;
  StepProfiler* active_profiler_ = nullptr;  // profiler_ during a profiled step
  Clock::time_point run_start_;
  Clock::time_point window_start_;
  absl::Duration window_data_wait_;
  int64_t window_images_ = 0;
  Clock::time_point measure_start_;   // throughput after the warm-up
  absl::Duration measure_data_wait_;
  int64_t measure_images_ = 0;
  int64_t measure_steps_ = 0;
  at::Tensor loss_window_;            // summed step losses since the last progress line
  int64_t loss_window_steps_ = 0;
  double last_loss_ = NAN;
  int64_t skipped_steps_ = 0;
  absl::optional<ValidationResult> last_val_;
  double best_top1_ = -1;
  int64_t best_epoch_ = -1;
};

// Validation and checkpoints are not training: their time is left out of the images/s
// figures (the progress window and the measured throughput).
void Trainer::ExcludeFromThroughput(Clock::time_point since) {
  const Clock::duration paused = Clock::now() - since;
  window_start_ += paused;
  measure_start_ += paused;
}

void Trainer::Note(const std::string& line) {
  if (!rank0()) return;
  if (progress_ != nullptr) progress_->Finish();
  LogInfo("%s", line);
}

RunGeometry Trainer::Geometry() const {
  RunGeometry g;
  g.model = o_.model;
  g.num_classes = o_.num_classes;
  g.image_size = o_.image_size;
  g.world_size = rank_.world_size;
  g.batch_size = o_.batch_size;
  g.accumulate = o_.accumulate;
  g.optimizer = o_.optimizer;
  g.seed = seed_;
  return g;
}

absl::Status Trainer::SetUpModel() {
  if (!o_.use_cuda) {
    // CPU ranks share the node's cores.
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, cores / std::max(1, rank_.local_size)));
  } else if (o_.deterministic) {
    // cuBLAS needs a fixed workspace configuration for deterministic results; it reads the
    // variable when its first handle is made, after this.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setBenchmarkCuDNN(false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  } else {
    at::globalContext().setBenchmarkCuDNN(o_.cudnn_benchmark);
  }
  torch::manual_seed(o_.seed);
  ASSIGN_OR_RETURN(model_, MakeModel(o_.model, o_.num_classes));
  model_->to(device_);
  if (o_.channels_last) {
    c10::NoGradGuard no_grad;
    for (at::Tensor& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  for (const auto& item : model_->named_parameters()) {
    names_.push_back(item.key());
    parameters_.push_back(item.value());
  }
  Communicator* gradient_communicator = &communicator_;
  if (o_.profile_steps > 0 && !o_.use_cuda) {
    timed_ = std::make_unique<TimedCommunicator>(&communicator_);
    gradient_communicator = timed_.get();
  }
  ASSIGN_OR_RETURN(buckets_, GradBuckets::Create(parameters_, names_, o_.bucket_bytes, gradient_communicator));

  OptimizerOptions optimizer_options;
  optimizer_options.kind = o_.optimizer;
  optimizer_options.learning_rate = o_.learning_rate;
  optimizer_options.momentum = o_.momentum;
  optimizer_options.nesterov = o_.nesterov;
  optimizer_options.weight_decay = o_.weight_decay;
  optimizer_options.beta1 = o_.adam_beta1;
  optimizer_options.beta2 = o_.adam_beta2;
  optimizer_options.eps = o_.adam_eps;
  // Biases and normalisation parameters (one dimension) without decay, if asked.
  std::vector<ParameterGroup> groups(2);
  groups[0].weight_decay = o_.weight_decay;
  groups[1].weight_decay = o_.no_decay_bn_bias ? 0.0 : o_.weight_decay;
  std::vector<std::string> decayed, not_decayed;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const bool exempt = o_.no_decay_bn_bias && parameters_[i].dim() <= 1;
    groups[exempt ? 1 : 0].parameters.push_back(parameters_[i]);
    (exempt ? not_decayed : decayed).push_back(names_[i]);
  }
  optimizer_names_ = decayed;
  optimizer_names_.insert(optimizer_names_.end(), not_decayed.begin(), not_decayed.end());
  ASSIGN_OR_RETURN(optimizer_, FusedOptimizer::Create(std::move(groups), optimizer_options));

  // Loss scaling guards fp16 gradients against underflow; bf16 and fp32 do not need it.
  LossScalerOptions scaler_options;
  scaler_options.init_scale = o_.init_scale;
  scaler_options.growth_factor = o_.growth_factor;
  scaler_options.backoff_factor = o_.backoff_factor;
  scaler_options.growth_interval = o_.growth_interval;
  scaler_options.enabled = o_.use_cuda && o_.precision == Precision::kFloat16;
  ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::Create(scaler_options));
  scaler_.emplace(std::move(scaler));

  autocast_ = o_.use_cuda && o_.precision != Precision::kFloat32;
  TrainStepOptions step_options;
  step_options.label_smoothing = o_.label_smoothing;
  step_options.clip_grad_norm = o_.clip_grad_norm;
  step_options.autocast = autocast_;
  step_ = std::make_unique<TrainStep>(*model_, *buckets_, *optimizer_, *scaler_, parameters_, step_options);
  return absl::OkStatus();
}

absl::Status Trainer::SetUpOutputs() {
  if (!o_.sample_log.empty()) {
    const std::string path = absl::StrCat(o_.sample_log, ".rank", rank_.rank);
    sample_log_.open(path, std::ios::trunc);
    if (!sample_log_) return absl::InvalidArgumentError(absl::StrCat("--sample_log: cannot write ", path));
  }
  if (!rank0()) return absl::OkStatus();
  const char* in_place_env = std::getenv("STOKER_PROGRESS_IN_PLACE");
  const bool in_place = o_.progress == "inplace" ||
                        (o_.progress == "auto" && (isatty(STDERR_FILENO) != 0 ||
                                                   (in_place_env != nullptr && std::string(in_place_env) == "1")));
  progress_ = std::make_unique<ProgressPrinter>(stderr, in_place);
  if (!o_.loss_log.empty()) {
    loss_log_.open(o_.loss_log, std::ios::trunc);
    if (!loss_log_) return absl::InvalidArgumentError(absl::StrCat("--loss_log: cannot write ", o_.loss_log));
  }
  if (!o_.metrics_jsonl.empty()) {
    ASSIGN_OR_RETURN(jsonl_, JsonlWriter::Open(o_.metrics_jsonl));
  }
  if (!o_.tensorboard_dir.empty()) {
    ASSIGN_OR_RETURN(tensorboard_, TensorBoardWriter::Create(o_.tensorboard_dir));
  }
  if (!o_.checkpoint_dir.empty()) {
    absl::Status made = MakeDirectories(o_.checkpoint_dir);
    if (!made.ok()) return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir: ", made.message()));
    ASSIGN_OR_RETURN(int stale, RemoveStaleTemporaries(o_.checkpoint_dir));
    if (stale > 0) LogInfo("removed %d partial checkpoint file(s) of an interrupted write", stale);
  }
  return absl::OkStatus();
}

absl::Status Trainer::SetUpData() {
  feeder_options_.batch_size = o_.batch_size;
  feeder_options_.image_size = o_.image_size;
  feeder_options_.dtype = InputType(o_);
  std::copy(o_.mean, o_.mean + 3, feeder_options_.mean);
  std::copy(o_.stddev, o_.stddev + 3, feeder_options_.stddev);
  feeder_options_.timeout = o_.data_timeout;

  if (o_.synthetic_steps > 0) {
    batches_per_epoch_ = trained_per_epoch_ = o_.synthetic_steps;
  } else {
    RingRequest request;
    request.rank = rank_.rank;
    request.world_size = rank_.world_size;
    request.batch_size = o_.batch_size;
    request.image_size = o_.image_size;
    request.slot_count = o_.ring_slots;
    request.train = o_.train_split;
    ASSIGN_OR_RETURN(ring_, RingClient::Connect(o_.data_socket, request, o_.data_timeout));
    ASSIGN_OR_RETURN(EpochInfo first, ring_->StartEpoch(start_.epoch, seed_));
    batches_per_epoch_ = first.batches;
    const bool short_last = first.samples % o_.batch_size != 0;
    trained_per_epoch_ = batches_per_epoch_ - (o_.drop_last_batch && short_last ? 1 : 0);
    if (trained_per_epoch_ < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch_size=", o_.batch_size, ": an epoch gives each rank ", first.samples,
          " samples, not one full batch (use a smaller batch or --nodrop_last_batch)"));
    }
    if (o_.val_every > 0 && !o_.data_only && !o_.train_split) {
      // Training on the validation split (a benchmark's choice): validating on it too
      // would only measure the training data again.
      if (rank0()) LogInfo("--data_split=val: training on the validation split, so no validation");
    } else if (o_.val_every > 0 && !o_.data_only) {
      RingRequest val_request = request;
      val_request.train = false;
      val_request.batch_size = o_.val_batch_size > 0 ? o_.val_batch_size : o_.batch_size;
      absl::StatusOr<std::unique_ptr<RingClient>> val = RingClient::Connect(o_.data_socket, val_request, o_.data_timeout);
      // Every rank sees the same answer from its node's service (same datasets on every
      // node), so every rank makes the same choice here.
      if (val.ok()) {
        val_ring_ = std::move(*val);
      } else if (absl::StrContains(val.status().message(), "no validation split")) {
        if (rank0()) {
          LogWarning("the data service has no validation split: validation is off (launcher --val_dir; "
                     "--val_every=0 silences this)");
        }
      } else {
        return val.status();
      }
    }
  }
  steps_per_epoch_ = (trained_per_epoch_ + o_.accumulate - 1) / o_.accumulate;
  LrScheduleOptions schedule;
  schedule.kind = o_.lr_schedule;
  schedule.base_lr = o_.learning_rate;
  schedule.lr_min = o_.lr_min;
  schedule.steps_per_epoch = steps_per_epoch_;
  schedule.epochs = o_.epochs;
  schedule.warmup_epochs = o_.warmup_epochs;
  schedule.step_epochs = o_.lr_step_epochs;
  schedule.gamma = o_.lr_step_gamma;
  ASSIGN_OR_RETURN(LearningRateSchedule lr, LearningRateSchedule::Create(schedule));
  schedule_.emplace(lr);
  return absl::OkStatus();
}

absl::Status Trainer::SetUpFeeder() {
  if (o_.synthetic_steps > 0) {
    TrainingBatch batch;
    const int64_t s = o_.image_size;
    batch.images = at::randn({o_.batch_size, 3, s, s}, at::TensorOptions().device(device_).dtype(feeder_options_.dtype))
                       .contiguous(at::MemoryFormat::ChannelsLast);
    batch.labels = at::randint(0, o_.num_classes, {o_.batch_size}, at::TensorOptions().device(device_).dtype(at::kLong));
    batch.count = o_.batch_size;
    feeder_ = std::make_unique<FixedBatchFeeder>(std::move(batch), o_.synthetic_steps,
                                                 start_.epoch * o_.synthetic_steps + start_.batches_done);
    return absl::OkStatus();
  }
  ring_source_ = std::make_unique<RingBatchSource>(ring_.get());
  BatchSource* source = ring_source_.get();
  if (start_.batches_done > 0) {
    source_ = std::make_unique<SkippingBatchSource>(source, start_.epoch, start_.batches_done);
    source = source_.get();
  }
  if (o_.use_cuda) {
#ifdef STOKER_WITH_CUDA
    ASSIGN_OR_RETURN(feeder_, MakeCudaBatchFeeder(source, feeder_options_, o_.cuda_device));
#endif
  } else {
    feeder_ = MakeCpuBatchFeeder(source, feeder_options_);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Trainer::WriteCheckpoint(const RunPosition& position) {
  if (o_.checkpoint_dir.empty() || !rank0()) return std::string();
  const Clock::time_point start = Clock::now();
  TrainingStateRefs refs{model_.get(), optimizer_.get(), optimizer_names_, &*scaler_};
  ASSIGN_OR_RETURN(std::string bytes, EncodeCheckpoint(refs, position, Geometry()));
  const std::string path = absl::StrCat(o_.checkpoint_dir, "/", CheckpointFileName(position.global_step));
  RETURN_IF_ERROR(WriteFileAtomically(path, bytes));
  RETURN_IF_ERROR(RemoveOldCheckpoints(o_.checkpoint_dir, o_.keep_checkpoints));
  ExcludeFromThroughput(start);
  Note(absl::StrFormat("checkpoint %s (epoch %d, batch %d, step %d; %.1f MB in %.2f s)", path,
                       position.epoch + 1, position.batches_done, position.global_step, bytes.size() / 1e6,
                       Seconds(Clock::now() - start)));
  return path;
}

absl::StatusOr<TrainingOutcome> Trainer::Stop(TrainingOutcome::End end, int signal_number,
                                              const RunPosition& position) {
  TrainingOutcome outcome;
  outcome.end = end;
  outcome.signal = signal_number;
  absl::StatusOr<std::string> written = WriteCheckpoint(position);
  // Every rank waits for rank 0's checkpoint: a rank that exits early with a non-zero code
  // makes mpirun end the others, rank 0 included.
  int64_t ok = written.ok() ? 1 : 0;
  if (rank_.world_size > 1) {
    RETURN_IF_ERROR(host_.Broadcast(&ok, sizeof(ok), 0));
    RETURN_IF_ERROR(host_.Synchronize());
  }
  if (!written.ok()) return written.status();
  if (ok == 0) return absl::DataLossError("rank 0 could not write the checkpoint (its log says why)");
  outcome.checkpoint = *written;
  if (rank0()) {
    if (progress_ != nullptr) progress_->Finish();
    const std::string why = end == TrainingOutcome::End::kStopSignal
                                ? absl::StrCat("stopped by ", strsignal(signal_number))
                                : absl::StrCat("stopped after --stop_after_steps=", o_.stop_after_steps);
    LogInfo("%s at epoch %d, batch %d of %d (step %d)%s", why, position.epoch + 1, position.batches_done,
            batches_per_epoch_, position.global_step,
            outcome.checkpoint.empty() ? "; no checkpoint (no --checkpoint_dir)"
                                       : absl::StrCat("; resume with --resume=auto (", outcome.checkpoint, ")"));
    if (jsonl_ != nullptr) {
      RETURN_IF_ERROR(jsonl_->Write(JsonObject()
                                        .Add("type", "stop")
                                        .Add("reason", end == TrainingOutcome::End::kStopSignal ? "signal" : "stop_after_steps")
                                        .Add("epoch", position.epoch + 1)
                                        .Add("step", position.batches_done)
                                        .Add("global_step", position.global_step)
                                        .Add("checkpoint", outcome.checkpoint)));
    }
  }
  return outcome;
}

// Gets micro-batch `index` of `epoch` and votes (Note [Stopping together]). Returns the
// agreed stop signal, or 0 with `batch` filled.
absl::StatusOr<int> Trainer::NextMicroBatch(int64_t epoch, int64_t index, TrainingBatch* batch) {
  absl::StatusOr<TrainingBatch> next = feeder_->Next();
  StepProfiler* profiler = active_profiler_;
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kHostToDevice));
  absl::Status local = data_error_.ok() ? next.status() : data_error_;
  data_error_ = absl::OkStatus();
  if (next.ok() && (next->epoch != epoch || next->step != index)) {
    return absl::InternalError(absl::StrCat("the data service delivered epoch ", next->epoch, " step ",
                                            next->step, ", expected ", epoch, " ", index));
  }
  ASSIGN_OR_RETURN(int stop, AgreeOnStop(host_, local));
  if (stop != 0) return stop;
  *batch = std::move(*next);
  if (profiler != nullptr) {
    const double wait = absl::ToDoubleSeconds(batch->data_wait);
    if (profiler->on_gpu()) {
      profiler->AddHostSeconds(StepPhase::kDataWait, wait);
    } else {
      profiler->MoveHostSeconds(StepPhase::kHostToDevice, StepPhase::kDataWait, wait);
    }
    RETURN_IF_ERROR(profiler->Mark(StepPhase::kDataWait));  // the vote: waiting for the other ranks' data
  }
  window_data_wait_ += batch->data_wait;
  measure_data_wait_ += batch->data_wait;
  if (sample_log_.is_open()) {
    sample_log_ << epoch << " " << index;
    for (int64_t sample : batch->sample_indices) sample_log_ << " " << sample;
    sample_log_ << "\n";
  }
  return 0;
}

absl::Status Trainer::AfterOptimizerStep(int64_t epoch, int64_t batches_done, int group,
                                         const at::Tensor& loss_sum) {
  ++global_step_;
  ++steps_this_run_;
  skipped_steps_ += step_->skipped() ? 1 : 0;
  const int64_t images = static_cast<int64_t>(group) * o_.batch_size * rank_.world_size;
  window_images_ += images;
  measure_images_ += images;
  ++measure_steps_;
  at::Tensor step_loss = loss_sum.to(at::kFloat) / group;
  loss_window_ = loss_window_.defined() ? loss_window_ + step_loss : step_loss;
  ++loss_window_steps_;
  if (steps_this_run_ == 1) run_start_ = Clock::now();
  if (steps_this_run_ == o_.warmup_steps) {
    if (o_.use_cuda) ReportDeviceMemory(o_, rank_, /*log=*/rank_.local_rank == 0);
    // The window starts when the device has finished the warm-up steps, not when the host
    // has queued them (it runs several steps ahead), as the Python recipes time.
    RETURN_IF_ERROR(WaitForDevice(o_));
    measure_start_ = Clock::now();
    measure_data_wait_ = absl::ZeroDuration();
    measure_images_ = 0;
    measure_steps_ = 0;
  }

  const int64_t step_in_epoch = (batches_done + o_.accumulate - 1) / o_.accumulate;
  const bool last_of_epoch = batches_done >= trained_per_epoch_;
  if (step_in_epoch % o_.log_every != 0 && !last_of_epoch) return absl::OkStatus();

  // Progress: the loss averaged over the window and over ranks (a collective on every rank).
  at::Tensor mean_loss = (loss_window_ / loss_window_steps_).reshape({1}).contiguous();
  RETURN_IF_ERROR(communicator_.AllReduce(mean_loss.data_ptr(), 1, ElementType::kFloat32, ReduceOp::kAverage));
  RETURN_IF_ERROR(communicator_.Synchronize());
  last_loss_ = mean_loss.item<float>();
  loss_window_ = at::Tensor();
  loss_window_steps_ = 0;
  double grad_norm = NAN;
  if (step_->grad_norm().defined()) grad_norm = step_->grad_norm().item<float>();
  if (!rank0()) return absl::OkStatus();

  const Clock::time_point now = Clock::now();
  const double window = std::max(Seconds(now - window_start_), 1e-9);
  const double images_per_second = window_images_ / window;
  const double data_wait = std::min(1.0, absl::ToDoubleSeconds(window_data_wait_) / window);
  window_start_ = now;
  window_images_ = 0;
  window_data_wait_ = absl::ZeroDuration();
  const int64_t total_steps = schedule_->total_steps();
  double eta = -1;
  if (steps_this_run_ > 1) {
    eta = Seconds(now - run_start_) / (steps_this_run_ - 1) * std::max<int64_t>(0, total_steps - global_step_);
  }
  const double lr = schedule_->At(global_step_ - 1);
  ProgressSnapshot snapshot;
  snapshot.epoch = static_cast<int>(epoch + 1);
  snapshot.epochs = o_.epochs;
  snapshot.step = batches_done;
  snapshot.steps_per_epoch = batches_per_epoch_;
  snapshot.loss = last_loss_;
  snapshot.learning_rate = lr;
  snapshot.images_per_second = images_per_second;
  snapshot.data_wait_share = data_wait;
  snapshot.memory = MemoryText(o_);
  snapshot.eta_seconds = eta;
  progress_->Update(FormatProgressLine(snapshot));
  if (jsonl_ != nullptr) {
    JsonObject record;
    record.Add("type", "train")
        .Add("epoch", epoch + 1)
        .Add("step", batches_done)
        .Add("steps_per_epoch", batches_per_epoch_)
        .Add("global_step", global_step_)
        .Add("loss", last_loss_)
        .Add("lr", lr)
        .Add("images_per_second", images_per_second)
        .Add("data_wait_share", data_wait)
        .Add("elapsed_s", Seconds(now - run_start_))
        .Add("time", UnixSeconds());
    if (!std::isnan(grad_norm)) record.Add("grad_norm", grad_norm);
    RETURN_IF_ERROR(jsonl_->Write(record));
  }
  if (tensorboard_ != nullptr) {
    RETURN_IF_ERROR(tensorboard_->AddScalar("train/loss", last_loss_, global_step_));
    RETURN_IF_ERROR(tensorboard_->AddScalar("train/lr", lr, global_step_));
    RETURN_IF_ERROR(tensorboard_->AddScalar("train/images_per_second", images_per_second, global_step_));
    RETURN_IF_ERROR(tensorboard_->AddScalar("train/data_wait_share", data_wait, global_step_));
    if (!std::isnan(grad_norm)) RETURN_IF_ERROR(tensorboard_->AddScalar("train/grad_norm", grad_norm, global_step_));
  }
  return absl::OkStatus();
}

// Trains the rest of `epoch`. Returns an outcome when the run stops inside it.
absl::StatusOr<absl::optional<TrainingOutcome>> Trainer::TrainEpoch(int64_t epoch) {
  int64_t b = epoch == start_.epoch ? start_.batches_done : 0;
  // Ask for the next epoch now, so that its first batches are ready at the boundary.
  // A failure joins the next vote (Note [Stopping together]): the service may be stopping.
  if (ring_ != nullptr && epoch + 1 < o_.epochs) data_error_ = ring_->StartEpoch(epoch + 1, seed_).status();
  model_->train();
  const int profile_first = o_.warmup_steps;
  while (b < trained_per_epoch_) {
    const int group = static_cast<int>(std::min<int64_t>(o_.accumulate, trained_per_epoch_ - b));
    const bool profile = o_.profile_steps > 0 && steps_this_run_ >= profile_first &&
                         steps_this_run_ < profile_first + o_.profile_steps;
    if (profile) {
      if (profiler_ == nullptr) {
        void* stream = nullptr;
#ifdef STOKER_WITH_CUDA
        if (o_.use_cuda) stream = at::cuda::getCurrentCUDAStream(o_.cuda_device).stream();
#endif
        ASSIGN_OR_RETURN(profiler_, StepProfiler::Create(o_.use_cuda, stream, o_.cuda_device));
      }
      RETURN_IF_ERROR(profiler_->StartStep());
    }
    StepProfiler* profiler = profile ? profiler_.get() : nullptr;
    active_profiler_ = profiler;
    const double comm_before = timed_ != nullptr ? timed_->seconds() : 0;

    step_->Begin(group);
    at::Tensor loss_sum;
    for (int i = 0; i < group; ++i) {
      TrainingBatch batch;
      ASSIGN_OR_RETURN(int stop, NextMicroBatch(epoch, b + i, &batch));
      if (stop != 0) {
        return StopInEpoch(TrainingOutcome::End::kStopSignal, stop, RunPosition{epoch, b, global_step_});
      }
      ASSIGN_OR_RETURN(at::Tensor loss, step_->MicroBatch(batch.images, batch.labels, profiler));
      if (loss_log_.is_open()) {
        loss_log_ << absl::StrFormat("%d %d %.9g\n", epoch, b + i, loss.item<float>()) << std::flush;
      }
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    }
    RETURN_IF_ERROR(step_->Finish(schedule_->At(global_step_), profiler));
    if (profile) {
      if (timed_ != nullptr) {
        profiler_->MoveHostSeconds(StepPhase::kBackward, StepPhase::kAllreduceWait,
                                   timed_->seconds() - comm_before);
      }
      RETURN_IF_ERROR(profiler_->EndStep());
    }
    active_profiler_ = nullptr;
    b += group;
    RETURN_IF_ERROR(AfterOptimizerStep(epoch, b, group, loss_sum));
    if (o_.checkpoint_every_steps > 0 && global_step_ % o_.checkpoint_every_steps == 0) {
      RETURN_IF_ERROR(WriteCheckpoint(RunPosition{epoch, b, global_step_}).status());
    }
    if (o_.stop_after_steps > 0 && steps_this_run_ == o_.stop_after_steps) {
      return StopInEpoch(TrainingOutcome::End::kStopAfterSteps, 0, RunPosition{epoch, b, global_step_});
    }
  }
  // The short last batch (dropped): consumed so that the ring moves on to the next epoch.
  while (b < batches_per_epoch_) {
    TrainingBatch batch;
    ASSIGN_OR_RETURN(int stop, NextMicroBatch(epoch, b, &batch));
    if (stop != 0) {
      return StopInEpoch(TrainingOutcome::End::kStopSignal, stop, RunPosition{epoch, b, global_step_});
    }
    ++b;
  }
  return absl::optional<TrainingOutcome>();
}

// Validates on the validation ring. Returns the agreed stop signal (0: done).
absl::StatusOr<int> Trainer::Validate(int64_t epoch) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<EpochInfo> started = val_ring_->StartEpoch(epoch, seed_);
  ASSIGN_OR_RETURN(int stop_now, AgreeOnStop(host_, started.status()));
  if (stop_now != 0) return stop_now;
  const EpochInfo info = *started;
  RingBatchSource source(val_ring_.get());
  FeederOptions options = feeder_options_;
  options.batch_size = val_ring_->request().batch_size;
  std::unique_ptr<BatchFeeder> feeder;
  if (o_.use_cuda) {
#ifdef STOKER_WITH_CUDA
    ASSIGN_OR_RETURN(feeder, MakeCudaBatchFeeder(&source, options, o_.cuda_device));
#endif
  } else {
    feeder = MakeCpuBatchFeeder(&source, options);
  }
  model_->eval();
  ValidationTally tally(device_);
  {
    c10::InferenceMode inference;
    for (int64_t s = 0; s < info.batches; ++s) {
      absl::StatusOr<TrainingBatch> batch = feeder->Next();
      absl::Status local = batch.status();
      if (batch.ok() && (batch->epoch != epoch || batch->step != s)) {
        return absl::InternalError(absl::StrCat("the validation ring delivered epoch ", batch->epoch,
                                                " step ", batch->step, ", expected ", epoch, " ", s));
      }
      ASSIGN_OR_RETURN(int stop, AgreeOnStop(host_, local));
      if (stop != 0) {
        model_->train();
        return stop;
      }
      if (batch->sample_indices.size() != static_cast<size_t>(batch->count)) {
        return absl::InternalError("a validation batch came without its sample indices");
      }
      at::Tensor logits = model_->forward(batch->images);
      tally.Add(logits, batch->labels,
                CountedInValidation(batch->sample_indices, s * options.batch_size, rank_.rank, rank_.world_size));
    }
    if (autocast_) at::autocast::clear_cache();
  }
  feeder.reset();
  model_->train();
  ASSIGN_OR_RETURN(ValidationResult result, tally.Reduce(host_));
  ExcludeFromThroughput(start);
  last_val_ = result;
  if (result.top1 > best_top1_) {
    best_top1_ = result.top1;
    best_epoch_ = epoch + 1;
  }
  if (rank0()) {
    Note(absl::StrFormat("validation after epoch %d: top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%d samples, %.1f s)",
                         epoch + 1, 100 * result.top1, 100 * result.top5, result.loss, result.samples,
                         Seconds(Clock::now() - start)));
    if (jsonl_ != nullptr) {
      RETURN_IF_ERROR(jsonl_->Write(JsonObject()
                                        .Add("type", "val")
                                        .Add("epoch", epoch + 1)
                                        .Add("global_step", global_step_)
                                        .Add("top1", result.top1)
                                        .Add("top5", result.top5)
                                        .Add("loss", result.loss)
                                        .Add("samples", result.samples)
                                        .Add("time", UnixSeconds())));
    }
    if (tensorboard_ != nullptr) {
      RETURN_IF_ERROR(tensorboard_->AddScalar("val/top1", result.top1, global_step_));
      RETURN_IF_ERROR(tensorboard_->AddScalar("val/top5", result.top5, global_step_));
      RETURN_IF_ERROR(tensorboard_->AddScalar("val/loss", result.loss, global_step_));
    }
  }
  return 0;
}

// The input pipeline alone: fetch, copy and normalise every batch, train nothing.
absl::StatusOr<TrainingOutcome> Trainer::DataOnly() {
  measure_start_ = Clock::now();
  int64_t batches = 0;
  for (int64_t epoch = start_.epoch; epoch < o_.epochs; ++epoch) {
    if (ring_ != nullptr && epoch + 1 < o_.epochs) RETURN_IF_ERROR(ring_->StartEpoch(epoch + 1, seed_).status());
    for (int64_t b = 0; b < batches_per_epoch_; ++b, ++batches) {
      if (batches == o_.warmup_steps) {
        RETURN_IF_ERROR(WaitForDevice(o_));
        measure_start_ = Clock::now();
        measure_data_wait_ = absl::ZeroDuration();
        measure_images_ = 0;
      }
      ASSIGN_OR_RETURN(TrainingBatch batch, feeder_->Next());
      measure_data_wait_ += batch.data_wait;
      measure_images_ += static_cast<int64_t>(batch.count) * rank_.world_size;
    }
  }
  measure_steps_ = std::max<int64_t>(0, batches - o_.warmup_steps);
  return Finish();
}

absl::StatusOr<TrainingOutcome> Trainer::Finish() {
  RETURN_IF_ERROR(WaitForDevice(o_));
  TrainingOutcome outcome;
  const double seconds = std::max(Seconds(Clock::now() - measure_start_), 1e-9);
  const double images_per_second = measure_images_ / seconds;
  const double data_wait_share = absl::ToDoubleSeconds(measure_data_wait_) / seconds;
  if (!o_.data_only && !o_.checkpoint_dir.empty() && steps_this_run_ > 0) {
    ASSIGN_OR_RETURN(outcome.checkpoint, WriteCheckpoint(RunPosition{o_.epochs, 0, global_step_}));
  }
  if (rank0() && !o_.export_path.empty() && !o_.data_only) {
    ASSIGN_OR_RETURN(std::string weights, PickleStateDict(*model_));
    absl::Status written = WriteFileAtomically(o_.export_path, weights);
    if (!written.ok()) return absl::Status(written.code(), absl::StrCat("--export: ", written.message()));
  }
  if (rank0()) {
    if (progress_ != nullptr) progress_->Finish();
    LogInfo("done: %d epochs, %d optimizer steps (%d in this run); %.1f images/s over %d ranks after "
            "%d warm-up steps; data wait %.1f%% of the time",
            o_.epochs, global_step_, steps_this_run_, images_per_second, rank_.world_size, o_.warmup_steps,
            100 * data_wait_share);
    if (scaler_.has_value() && scaler_->enabled()) {
      LogInfo("fp16 loss scale %.0f; %d step(s) skipped for inf/NaN gradients", scaler_->scale(),
              static_cast<int>(skipped_steps_));
    }
    if (last_val_.has_value()) {
      LogInfo("validation: final top-1 %.2f%%, top-5 %.2f%% (%d samples); best top-1 %.2f%% after epoch %d",
              100 * last_val_->top1, 100 * last_val_->top5, last_val_->samples, 100 * best_top1_, best_epoch_);
    }
    if (profiler_ != nullptr && profiler_->steps() > 0) LogInfo("%s", profiler_->Report());
    if (!o_.export_path.empty() && !o_.data_only) LogInfo("exported the model's state dict to %s", o_.export_path);
    if (jsonl_ != nullptr) {
      JsonObject record;
      record.Add("type", "end")
          .Add("epochs", o_.epochs)
          .Add("global_step", global_step_)
          .Add("images_per_second", images_per_second)
          .Add("data_wait_share", data_wait_share)
          .Add("elapsed_s", Seconds(Clock::now() - run_start_))
          .Add("time", UnixSeconds());
      if (last_val_.has_value()) {
        record.Add("val_top1", last_val_->top1).Add("val_top5", last_val_->top5).Add("best_top1", best_top1_);
      }
      RETURN_IF_ERROR(jsonl_->Write(record));
    }
    if (!o_.metrics_out.empty()) {
      std::ofstream out(o_.metrics_out, std::ios::trunc);
      JsonObject summary;
      summary.Add("model", o_.model)
          .Add("world_size", rank_.world_size)
          .Add("batch_size", o_.batch_size)
          .Add("image_size", o_.image_size)
          .Add("synthetic", o_.synthetic_steps > 0)
          .Add("images_per_second", images_per_second)
          .Add("data_wait_share", data_wait_share)
          .Add("data_only", o_.data_only)
          .Add("measured_steps", measure_steps_)
          .Add("global_step", global_step_)
          .Add("final_loss", last_loss_);
      if (last_val_.has_value()) {
        summary.Add("val_top1", last_val_->top1).Add("val_top5", last_val_->top5).Add("val_samples", last_val_->samples);
      }
      if (profiler_ != nullptr && profiler_->steps() > 0) {
        for (int p = 0; p < kStepPhaseCount; ++p) {
          const StepPhase phase = static_cast<StepPhase>(p);
          summary.Add(absl::StrCat("profile_", StepPhaseName(phase), "_ms"), 1e3 * profiler_->MeanSeconds(phase));
        }
      }
      out << summary.Build() << "\n";
      if (!out) return absl::InvalidArgumentError(absl::StrCat("--metrics_out: cannot write ", o_.metrics_out));
    }
  }
  if (o_.use_cuda) ReportDeviceMemory(o_, rank_, /*log=*/rank_.local_rank == 0);
  if (!o_.final_params_out.empty()) {
    RETURN_IF_ERROR(WriteParameters(*model_, absl::StrCat(o_.final_params_out, ".rank", rank_.rank)));
  }
  return outcome;
}

absl::StatusOr<TrainingOutcome> Trainer::Run() {
  RETURN_IF_ERROR(SetUpModel());
  RETURN_IF_ERROR(SetUpOutputs());

  // Rank 0 owns the seed: every rank and so every data service uses its value.
  int64_t seed = static_cast<int64_t>(o_.seed);
  if (rank_.world_size > 1) RETURN_IF_ERROR(host_.Broadcast(&seed, sizeof(seed), 0));
  seed_ = static_cast<uint64_t>(seed);

  ASSIGN_OR_RETURN(absl::optional<CheckpointReader> checkpoint, LoadResumeCheckpoint(o_, rank_, host_));
  absl::optional<RunGeometry> saved;
  if (checkpoint.has_value()) {
    ASSIGN_OR_RETURN(saved, CheckpointGeometry(*checkpoint));
    ASSIGN_OR_RETURN(start_, CheckpointPosition(*checkpoint));
    RunGeometry current = Geometry();
    current.seed = saved->seed;
    RETURN_IF_ERROR(CheckResumable(*saved, start_, current, checkpoint->source()));
    TrainingStateRefs refs{model_.get(), optimizer_.get(), optimizer_names_, &*scaler_};
    RETURN_IF_ERROR(RestoreTrainingState(*checkpoint, refs));
    if (saved->seed != seed_ && rank0()) {
      LogWarning("--seed=%d differs from the checkpoint's %d: continuing with the checkpoint's", seed_, saved->seed);
    }
    seed_ = saved->seed;
    resumed_ = true;
    if (rank0()) {
      LogInfo("resuming from %s: epoch %d, batch %d, step %d", checkpoint->source(), start_.epoch + 1,
              start_.batches_done, start_.global_step);
    }
  } else {
    RETURN_IF_ERROR(BroadcastModelState(*model_, communicator_));
  }
  checkpoint.reset();
  global_step_ = start_.global_step;

  if (start_.epoch >= o_.epochs) {
    if (rank0()) LogInfo("the checkpoint is at the end of training (%d epochs): nothing to train", o_.epochs);
    return Finish();
  }
  RETURN_IF_ERROR(SetUpData());
  if (saved.has_value() && start_.batches_done == 0 &&
      (saved->world_size != rank_.world_size || saved->batch_size != o_.batch_size ||
       saved->accumulate != o_.accumulate)) {
    // At an epoch boundary the run may change shape; the schedule continues at the epoch.
    global_step_ = start_.epoch * steps_per_epoch_;
    if (rank0()) LogInfo("the run's batch geometry changed: the schedule continues at step %d", global_step_);
  }
  RETURN_IF_ERROR(SetUpFeeder());
  if (autocast_) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, feeder_options_.dtype);
  }
  if (rank0()) {
    LogInfo("training %s: %d epochs of %d batches (%d optimizer steps each) on %d rank(s), batch %d x %d%s, "
            "lr %g (%s)", o_.model, o_.epochs, batches_per_epoch_, steps_per_epoch_, rank_.world_size,
            o_.batch_size, o_.accumulate, o_.accumulate > 1 ? " (accumulated)" : "", o_.learning_rate,
            o_.lr_schedule == LrSchedule::kCosine ? "cosine" : o_.lr_schedule == LrSchedule::kStep ? "step" : "constant");
  }
  measure_start_ = window_start_ = run_start_ = Clock::now();
  if (o_.data_only) return DataOnly();

  for (int64_t epoch = start_.epoch; epoch < o_.epochs; ++epoch) {
    ASSIGN_OR_RETURN(absl::optional<TrainingOutcome> stopped, TrainEpoch(epoch));
    if (stopped.has_value()) return *stopped;
    const bool last = epoch + 1 == o_.epochs;
    if (val_ring_ != nullptr && ((epoch + 1) % o_.val_every == 0 || last)) {
      ASSIGN_OR_RETURN(int stop, Validate(epoch));
      if (stop != 0) {
        return Stop(TrainingOutcome::End::kStopSignal, stop, RunPosition{epoch + 1, 0, global_step_});
      }
    }
    if (!last && o_.checkpoint_every_epochs > 0 && (epoch + 1) % o_.checkpoint_every_epochs == 0) {
      RETURN_IF_ERROR(WriteCheckpoint(RunPosition{epoch + 1, 0, global_step_}).status());
    }
  }
  return Finish();
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

absl::StatusOr<TrainingOutcome> RunTraining(const TrainerOptions& options, const RankInfo& rank,
                                            Communicator& communicator, Communicator& host_communicator) {
  RETURN_IF_ERROR(ValidateOptions(options));
  // Every collective gets a deadline (Note [Collective deadline] in trainer/collective_watchdog.h).
  ASSIGN_OR_RETURN(CollectiveProgressTable progress_table,
                   ShareNodeProgressTable(host_communicator, NodePlace{rank.local_rank, rank.local_size, rank.node_index}));
  CollectiveWatchdogOptions watch;
  watch.timeout = options.collective_timeout;
  watch.abort_grace = options.collective_abort_grace;
  watch.exit_code = kExitError;
  ASSIGN_OR_RETURN(std::unique_ptr<CollectiveWatchdog> watchdog,
                   CollectiveWatchdog::Start(watch, WatchedRank{rank.rank, rank.world_size, rank.local_rank, rank.node_index},
                                             {&communicator, &host_communicator}, &progress_table));
  try {
    Trainer trainer(options, rank, communicator, host_communicator);
    return trainer.Run();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what_without_backtrace()));
  }
}

}  // namespace stoker::trainer
