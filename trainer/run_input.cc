#include "trainer/run_input.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data_service/ring/ring_client.h"
#include "trainer/device.h"
#include "trainer/input/decode_share_prior.h"
#include "trainer/input/make_feeder.h"
#include "trainer/input/share_controlled_feeder.h"
#include "trainer/input/synthetic_feeder.h"

namespace stoker::trainer {
namespace {

using data_service::BatchView;
using data_service::EpochInfo;
using data_service::RingClient;
using data_service::RingRequest;

FeederOptions FeederOptionsFor(const TrainerOptions& o, const RunContext& context) {
  FeederOptions feeder;
  feeder.batch_size = o.input.batch_size;
  feeder.image_size = o.input.image_size;
  feeder.dtype = InputDtype(o.device, context);
  std::copy(o.input.mean, o.input.mean + 3, feeder.mean);
  std::copy(o.input.stddev, o.input.stddev + 3, feeder.stddev);
  feeder.timeout = o.input.data_timeout;
  feeder.gpu_decode_arena_bytes = GpuDecodeArenaBytes(o.input);
  return feeder;
}

// The rest of the epoch a run resumed in comes from the data service numbered from step
// 0 (Note [The rest of an epoch] in data_service/dataset/sampler.h): renumber its batches
// from `first`, their index in the epoch, so that the training loop sees one numbering.
class RenumberingBatchSource final : public BatchSource {
 public:
  RenumberingBatchSource(std::unique_ptr<BatchSource> inner, int64_t epoch, int64_t first)
      : inner_(std::move(inner)), epoch_(epoch), first_(first) {}
  absl::StatusOr<BatchView> Acquire(absl::Duration timeout) override {
    ASSIGN_OR_RETURN(BatchView view, inner_->Acquire(timeout));
    if (view.epoch == epoch_) view.step += first_;
    return view;
  }
  absl::Status Release(const BatchView& batch) override { return inner_->Release(batch); }
  absl::StatusOr<std::string> ReportBadSample(int64_t epoch, int64_t sample_index,
                                              absl::string_view why) override {
    return inner_->ReportBadSample(epoch, sample_index, why);
  }
  void* memory_base() const override { return inner_->memory_base(); }
  size_t memory_bytes() const override { return inner_->memory_bytes(); }

 private:
  std::unique_ptr<BatchSource> inner_;
  int64_t epoch_;
  int64_t first_;
};

// Note [A stuck data service]
// A data service that keeps its socket open but sends no batch within --data_timeout_s
// (stopped by SIGSTOP, hung in the kernel, deadlocked) is a lost peer like a dead one: the
// batch's DeadlineExceeded is tagged kExitPeerLost, so that the job ends with 69, which a
// scheduler requeues, not with a collective timeout's 124. The rank's failure reaches the
// others through the stop vote; a dead service is noticed sooner, by its closed socket.

// A feeder whose timeouts name the data service as stuck (Note [A stuck data service]).
// Owned by the training thread, as the feeder it wraps.
class StuckServiceFeeder final : public BatchFeeder {
 public:
  StuckServiceFeeder(std::unique_ptr<BatchFeeder> inner, std::string socket_path)
      : inner_(std::move(inner)), socket_path_(std::move(socket_path)) {}
  absl::StatusOr<TrainingBatch> Next() override {
    absl::StatusOr<TrainingBatch> batch = inner_->Next();
    if (!absl::IsDeadlineExceeded(batch.status())) return batch;
    return WithExitCode(
        absl::DeadlineExceededError(absl::StrCat(
            "the data service at ", socket_path_,
            " is stuck (stopped or hung; --data_timeout_s): ", batch.status().message())),
        kExitPeerLost);
  }

 private:
  std::unique_ptr<BatchFeeder> inner_;
  std::string socket_path_;
};

class SyntheticInput final : public RunInput {
 public:
  SyntheticInput(const TrainerOptions& o, const RunContext& context, const InputStart& start)
      : steps_(o.input.synthetic_steps),
        start_epoch_(start.epoch),
        first_(std::min(steps_,
                        start.samples_done / (int64_t{o.input.batch_size} * context.world_size()))),
        feeder_(FeederOptionsFor(o, context), o.model.num_classes, TrainingDevice(context), steps_,
                start.epoch * steps_ + first_) {}
  int64_t batches_per_epoch() const override { return steps_; }
  int64_t trained_per_epoch() const override { return steps_; }
  EpochBatches BatchesOf(int64_t epoch) const override {
    return {epoch == start_epoch_ ? first_ : 0, steps_, steps_};
  }
  BatchFeeder& feeder() override { return feeder_; }
  absl::Status PrefetchEpoch(int64_t) override { return absl::OkStatus(); }
  bool has_validation() const override { return false; }
  absl::StatusOr<ValidationPass> StartValidation(int64_t) override {
    return absl::FailedPreconditionError("synthetic input has no validation split");
  }

 private:
  int64_t steps_;
  int64_t start_epoch_;
  int64_t first_;  // batches of the start epoch already trained
  SyntheticBatchFeeder feeder_;
};

// The node data service's rings. Members in dependency order: the feeder reads the source,
// which reads the ring.
class RingInput final : public RunInput {
 public:
  static absl::StatusOr<std::unique_ptr<RingInput>> Open(const TrainerOptions& o,
                                                         const RunContext& context,
                                                         const InputStart& start,
                                                         DecodeShareGauge* decode_share);
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  int64_t trained_per_epoch() const override { return trained_per_epoch_; }
  EpochBatches BatchesOf(int64_t epoch) const override {
    if (epoch == start_epoch_) return start_batches_;
    return {0, trained_per_epoch_, batches_per_epoch_};
  }
  int64_t dataset_size() const override { return ring_->dataset_size(); }
  BatchFeeder& feeder() override { return *feeder_; }
  absl::Status PrefetchEpoch(int64_t epoch) override {
    return ring_->StartEpoch(epoch, seed_).status();
  }
  bool has_validation() const override { return val_ring_ != nullptr; }
  absl::StatusOr<ValidationPass> StartValidation(int64_t epoch) override;

 private:
  RingInput(FeederOptions feeder_options, at::Device device, uint64_t seed, std::string socket_path)
      : feeder_options_(feeder_options),
        device_(device),
        seed_(seed),
        socket_path_(std::move(socket_path)) {}

  // The GPU decode share of the training ring (`training_ring`) or the validation ring
  // (PlanGpuDecodeShare), with auto turned off, and a warning, where libnvjpeg is missing.
  static absl::StatusOr<GpuDecodeSharePlan> SharePlan(const TrainerOptions& o,
                                                      const RunContext& context, at::Device device,
                                                      bool training_ring);

  FeederOptions feeder_options_;
  at::Device device_;
  uint64_t seed_;
  std::string socket_path_;
  int64_t batches_per_epoch_ = 0;
  int64_t trained_per_epoch_ = 0;
  int64_t start_epoch_ = 0;
  EpochBatches start_batches_;  // of start_epoch_
  std::unique_ptr<RingClient> ring_;
  std::unique_ptr<RingClient> val_ring_;
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<BatchFeeder> feeder_;
};

absl::StatusOr<GpuDecodeSharePlan> RingInput::SharePlan(const TrainerOptions& o,
                                                        const RunContext& context,
                                                        at::Device device, bool training_ring) {
  ASSIGN_OR_RETURN(GpuDecodeSharePlan plan,
                   PlanGpuDecodeShare(o.input.gpu_decode_share, device.is_cuda(),
                                      o.device.deterministic, training_ring));
  if (!o.input.gpu_decode_share.has_value() && (plan.adaptive || plan.initial > 0)) {
    if (absl::Status usable = CheckGpuJpegDecode(device); !usable.ok()) {
      if (context.rank0() && training_ring) {
        LogWarning("--gpu_decode_share=auto: GPU JPEG decode is off: %s", usable.message());
      }
      return GpuDecodeSharePlan{0.0, false};
    }
  }
  return plan;
}

// Note [The decode share prior] in trainer/input/decode_share_prior.h: where an adaptive
// plan's share is remembered (`path`, empty for none), under which key, and the prior found.
struct RememberedShare {
  std::string path;
  std::string key;
  std::optional<DecodeSharePrior> prior;
};

RememberedShare RememberedShareFor(const TrainerOptions& o, const RunContext& context,
                                   int64_t dataset_size, const GpuDecodeSharePlan& plan) {
  RememberedShare remembered;
  if (!plan.adaptive) return remembered;
  remembered.path = DecodeSharePriorPath(o.input.gpu_decode_share_prior,
                                         std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
  if (remembered.path.empty()) return remembered;
  DecodeSharePriorSetting setting;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) setting.host = host;
  setting.dataset_size = dataset_size;
  setting.num_classes = o.model.num_classes;
  setting.model = o.model.name;
  setting.batch_size = o.input.batch_size;
  setting.image_size = o.input.image_size;
  setting.world_size = context.world_size();
  setting.data_only = o.benchmark.data_only;
  remembered.key = DecodeSharePriorKey(setting);
  const DecodeSharePriorLookup lookup =
      ReadDecodeSharePrior(remembered.path, remembered.key, absl::Now());
  if (!lookup.ignored.empty() && context.rank0()) {
    LogWarning("--gpu_decode_share_prior: ignored, the share adapts from the start-up ladder: %s",
               lookup.ignored);
  }
  remembered.prior = lookup.prior;
  if (remembered.prior.has_value() && context.rank0()) {
    LogInfo(
        "GPU decode share: starting from the prior %.3f (%.0f images/s, recorded %s) in %s "
        "(--gpu_decode_share_prior=none: from the start-up ladder)",
        remembered.prior->share, remembered.prior->images_per_second,
        absl::FormatTime("%Y-%m-%d %H:%M", remembered.prior->recorded, absl::LocalTimeZone()),
        remembered.path);
  }
  return remembered;
}

absl::StatusOr<std::unique_ptr<RingInput>> RingInput::Open(const TrainerOptions& o,
                                                           const RunContext& context,
                                                           const InputStart& start,
                                                           DecodeShareGauge* decode_share) {
  std::unique_ptr<RingInput> input(new RingInput(
      FeederOptionsFor(o, context), TrainingDevice(context), start.seed, o.input.data_socket));
  ASSIGN_OR_RETURN(GpuDecodeSharePlan share_plan,
                   SharePlan(o, context, input->device_, /*training_ring=*/true));
  RingRequest request;
  request.rank = context.rank.rank;
  request.world_size = context.world_size();
  request.batch_size = o.input.batch_size;
  request.image_size = o.input.image_size;
  request.slot_count = o.input.ring_slots;
  request.train = o.input.train_split;
  request.num_classes = o.model.num_classes;
  request.gpu_decode_share = share_plan.initial;
  request.gpu_decode_arena_bytes = GpuDecodeArenaBytes(o.input);
  input->feeder_options_.gpu_decode = share_plan.adaptive || share_plan.initial > 0;
  if (input->feeder_options_.gpu_decode && context.rank0()) {
    // Note [The GPU decode arena] in data_service/image/deferred_jpeg.h.
    LogInfo(
        "GPU JPEG decode: nvJPEG decodes the deferred samples from a private copy into an "
        "arena of at most %d MiB per GPU (--gpu_decode_arena_mib); the data service decodes "
        "JPEGs larger than that on its CPUs",
        o.input.gpu_decode_arena_mib);
  }
  ASSIGN_OR_RETURN(input->ring_,
                   RingClient::Connect(o.input.data_socket, request, o.input.data_timeout));
  const int64_t dataset_size = input->ring_->dataset_size();
  if (start.check_dataset_size) RETURN_IF_ERROR(start.check_dataset_size(dataset_size));
  const RememberedShare remembered = RememberedShareFor(o, context, dataset_size, share_plan);
  if (remembered.prior.has_value()) {
    // Before the first epoch starts, so that its first batch is already at the prior.
    share_plan.prior = remembered.prior->share;
    share_plan.initial = remembered.prior->share;
    input->ring_->RequestGpuDecodeShare(share_plan.initial);
  }
  // A whole epoch's batches, as DistributedSampler splits it (Note [The rest of an epoch]).
  const int64_t world = context.world_size();
  const int64_t batch = o.input.batch_size;
  const int64_t per_rank = (dataset_size + world - 1) / world;
  input->batches_per_epoch_ = (per_rank + batch - 1) / batch;
  const bool short_last = per_rank % batch != 0;
  input->trained_per_epoch_ =
      input->batches_per_epoch_ - (o.input.drop_last_batch && short_last ? 1 : 0);
  if (input->trained_per_epoch_ < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch_size=", o.input.batch_size, ": an epoch gives each rank ", per_rank,
                     " samples, not one full batch (use a smaller batch or --nodrop_last_batch)"));
  }
  if (start.samples_done >= dataset_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the run resumes at sample ", start.samples_done, " of epoch ",
                     start.epoch + 1, ", past the training split's ", dataset_size, " samples"));
  }
  // The batches of the epoch the run starts in: the rest of it from start.samples_done on
  // (all of it from 0), numbered from the batch index an uninterrupted run of this
  // geometry would have reached.
  ASSIGN_OR_RETURN(EpochInfo first,
                   input->ring_->StartEpoch(start.epoch, start.seed, start.samples_done));
  input->start_epoch_ = start.epoch;
  const int64_t first_batch = start.samples_done / (world * batch);
  const bool rest_short_last = first.samples % batch != 0;
  input->start_batches_ = {
      first_batch,
      first_batch + first.batches - (o.input.drop_last_batch && rest_short_last ? 1 : 0),
      first_batch + first.batches};
  if (o.validation.every > 0 && !o.benchmark.data_only && !o.input.train_split) {
    // Training on the validation split (a benchmark's choice): validating on it too would
    // only measure the training data again.
    if (context.rank0())
      LogInfo("--data_split=val: training on the validation split, so no validation");
  } else if (o.validation.every > 0 && !o.benchmark.data_only) {
    RingRequest val_request = request;
    val_request.train = false;
    val_request.batch_size =
        o.validation.batch_size > 0 ? o.validation.batch_size : o.input.batch_size;
    ASSIGN_OR_RETURN(const GpuDecodeSharePlan val_plan,
                     SharePlan(o, context, input->device_, /*training_ring=*/false));
    val_request.gpu_decode_share = val_plan.initial;
    absl::StatusOr<std::unique_ptr<RingClient>> val =
        RingClient::Connect(o.input.data_socket, val_request, o.input.data_timeout);
    // Every rank sees the same answer from its node's service (same datasets on every
    // node), so every rank makes the same choice here.
    if (val.ok()) {
      input->val_ring_ = std::move(*val);
    } else if (absl::StrContains(val.status().message(), "no validation split")) {
      if (context.rank0()) {
        LogWarning(
            "the data service has no validation split: validation is off (launcher --val_dir; "
            "--val_every=0 silences this)");
      }
    } else {
      return val.status();
    }
  }
  input->source_ = std::make_unique<RingBatchSource>(input->ring_.get());
  if (first_batch > 0) {
    input->source_ = std::make_unique<RenumberingBatchSource>(std::move(input->source_),
                                                              start.epoch, first_batch);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<BatchFeeder> feeder,
                   MakeBatchFeeder(input->source_.get(), input->feeder_options_, input->device_));
  feeder = std::make_unique<StuckServiceFeeder>(std::move(feeder), o.input.data_socket);
  ShareControl control;
  control.plan = share_plan;
  control.request = [ring = input->ring_.get()](double share) {
    ring->RequestGpuDecodeShare(share);
  };
  control.gauge = decode_share;
  control.log_changes = context.rank0();
  control.log_windows = context.rank0() && o.input.log_decode_share_windows;
  if (!remembered.path.empty() && context.rank0()) {
    control.on_hold = [path = remembered.path, key = remembered.key](double share, double rate) {
      const absl::Status written = WriteDecodeSharePrior(path, key, {share, rate, absl::Now()});
      if (written.ok()) {
        LogInfo("GPU decode share %.3f (%.0f images/s) remembered for this setting in %s", share,
                rate, path);
      } else {
        LogWarning("the GPU decode share is not remembered: %s", written.message());
      }
    };
  }
  input->feeder_ = MakeShareControlledFeeder(std::move(feeder), std::move(control));
  return input;
}

absl::StatusOr<ValidationPass> RingInput::StartValidation(int64_t epoch) {
  ASSIGN_OR_RETURN(EpochInfo info, val_ring_->StartEpoch(epoch, seed_));
  ValidationPass pass;
  pass.batches = info.batches;
  pass.batch_size = val_ring_->request().batch_size;
  pass.source = std::make_unique<RingBatchSource>(val_ring_.get());
  FeederOptions options = feeder_options_;
  options.batch_size = pass.batch_size;
  options.gpu_decode = val_ring_->request().gpu_decode_share > 0;
  ASSIGN_OR_RETURN(pass.feeder, MakeBatchFeeder(pass.source.get(), options, device_));
  pass.feeder = std::make_unique<StuckServiceFeeder>(std::move(pass.feeder), socket_path_);
  return pass;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunInput>> OpenRunInput(const TrainerOptions& options,
                                                       const RunContext& context,
                                                       const InputStart& start,
                                                       DecodeShareGauge* decode_share) {
  if (options.input.synthetic_steps > 0)
    return std::make_unique<SyntheticInput>(options, context, start);
  ASSIGN_OR_RETURN(std::unique_ptr<RingInput> input,
                   RingInput::Open(options, context, start, decode_share));
  return std::unique_ptr<RunInput>(std::move(input));
}

}  // namespace stoker::trainer
