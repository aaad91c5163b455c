#include "data_service/batch_producer.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "data_service/dataset/encoded_image.h"
#include "data_service/image/deferred_jpeg.h"

namespace stoker::data_service {
namespace {

// How long the production thread blocks in one wait before it looks at its stop flag.
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

// A bad sample's replacement is searched among at most this many following positions:
// when they are all unusable the data (or its disk) is broken beyond skipping.
constexpr int64_t kMaxReplacementTries = 64;

absl::Status CheckRequest(const RingRequest& request) {
  auto field = [](absl::string_view name, int32_t value, int32_t lo, int32_t hi) {
    if (value >= lo && value <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be in ", lo, "..", hi, ", got ", value));
  };
  if (absl::Status s = field("world_size", request.world_size, 1, 1 << 20); !s.ok()) return s;
  if (absl::Status s = field("rank", request.rank, 0, request.world_size - 1); !s.ok()) return s;
  if (absl::Status s = field("batch_size", request.batch_size, 1, kMaxBatchSize); !s.ok()) return s;
  if (absl::Status s = field("image_size", request.image_size, 1, kMaxImageSize); !s.ok()) return s;
  if (absl::Status s = field("slot_count", request.slot_count, 1, kMaxSlotCount); !s.ok()) return s;
  return absl::OkStatus();
}

absl::Status CheckShmRoom(const std::string& name, uint64_t bytes) {
  struct statvfs fs;
  if (statvfs("/dev/shm", &fs) != 0) return absl::OkStatus();  // posix_fallocate still checks
  const uint64_t available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (bytes > available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ring ", name, " needs ", bytes, " bytes but /dev/shm has only ", available,
                     " free: make batch_size, image_size or slot_count smaller"));
  }
  return absl::OkStatus();
}

// dataset.Load(), with an allocation that fails (the address-space limit, --max_memory)
// turned into an unusable sample: an image that needs more memory than a decode thread
// may have is the image's fault, and the service goes on with the others.
absl::Status LoadSample(const Dataset& dataset, int64_t index, const SampleOptions& options,
                        SampleScratch& scratch, uint8_t* dst) {
  try {
    return dataset.Load(index, options, scratch, dst);
  } catch (const std::bad_alloc&) {
    scratch.transform.ReleaseBuffers();
    std::vector<uint8_t>().swap(scratch.file_bytes);
    return MarkBadSample(absl::ResourceExhaustedError(
        "decoding it needs more memory than the data service's limit leaves a decode thread "
        "(--max_memory)"));
  }
}

}  // namespace

absl::Status CheckImageOptions(double eval_resize_ratio, int64_t max_image_pixels) {
  if (!(eval_resize_ratio >= 1.0 && eval_resize_ratio <= 8.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eval_resize_ratio: must be in [1, 8], got ", eval_resize_ratio));
  }
  if (max_image_pixels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_image_pixels: must be positive, got ", max_image_pixels));
  }
  return absl::OkStatus();
}

absl::Status CheckGpuDecodeShare(double share) {
  if (!(share >= 0.0 && share <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_decode_share: must be in [0, 1], got ", share));
  }
  return absl::OkStatus();
}

absl::Status CheckGpuDecodeShare(const std::optional<double>& share) {
  return share.has_value() ? CheckGpuDecodeShare(*share) : absl::OkStatus();
}

bool IsGpuDecodePosition(int32_t i, double share) {
  if (share <= 0.0) return false;
  if (share >= 1.0) return true;
  return std::floor((i + 1) * share) > std::floor(i * share);
}

struct BatchProducer::InFlightBatch {
  WritableSlot slot;
  int64_t epoch = 0;
  int64_t step = 0;
  int32_t count = 0;
  std::shared_ptr<const std::vector<int64_t>> order;  // the epoch's indices for this rank
  int64_t first = 0;                                  // position of sample 0 in `order`
  double gpu_decode_share = 0.0;  // fixed when the batch starts, for all its samples
  SampleOptions options;
  image::TransformSpec spec;  // options' transform, for deferred samples
  bool spec_ok = false;
  std::atomic<int32_t> remaining{0};
  absl::Notification done;
  bool traced = false;     // recorded in the trace (BatchProducerOptions::trace)
  int64_t ordinal = 0;     // of the ring's batches, in production order
  int64_t started_us = 0;  // TraceNowMicros() when its samples were submitted
  absl::Mutex mu;
  // The error of the lowest failing sample position, so the report does not depend on
  // thread timing.
  int32_t failed_position ABSL_GUARDED_BY(mu) = -1;
  absl::Status status ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<BatchProducer>> BatchProducer::Create(
    const BatchProducerOptions& options, std::shared_ptr<const Dataset> dataset, WorkerPool* pool,
    ErrorCallback on_error) {
  const RingRequest& request = options.request;
  if (absl::Status s = CheckRequest(request); !s.ok()) return s;
  SamplerOptions sampler_options;
  sampler_options.dataset_size = dataset->size();
  sampler_options.world_size = request.world_size;
  sampler_options.rank = request.rank;
  sampler_options.shuffle = request.train;
  sampler_options.drop_last = request.drop_last;
  absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(sampler_options);
  if (!sampler.ok()) return sampler.status();
  if (absl::Status s = CheckImageOptions(options.eval_resize_ratio, options.max_image_pixels);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckGpuDecodeShare(options.gpu_decode_share); !s.ok()) return s;
  if (options.bad_samples != nullptr) {
    if (absl::Status s = options.bad_samples->options().Validate(); !s.ok()) return s;
  }
  const RingGeometry geometry{request.slot_count, request.batch_size, request.image_size};
  absl::StatusOr<RingLayout> layout = RingLayout::For(geometry);
  if (!layout.ok()) return layout.status();
  if (absl::Status s = CheckShmRoom(options.segment_name, layout->total_bytes); !s.ok()) return s;
  absl::StatusOr<SharedMemorySegment> segment =
      SharedMemorySegment::Create(options.segment_name, layout->total_bytes);
  if (!segment.ok()) return segment.status();
  absl::StatusOr<RingProducer> producer =
      RingProducer::Initialize(segment->data(), segment->size(), geometry);
  if (!producer.ok()) return producer.status();
  return std::unique_ptr<BatchProducer>(
      new BatchProducer(options, std::move(dataset), pool, std::move(on_error), std::move(*segment),
                        std::move(*producer), std::move(*sampler)));
}

BatchProducer::BatchProducer(const BatchProducerOptions& options,
                             std::shared_ptr<const Dataset> dataset, WorkerPool* pool,
                             ErrorCallback on_error, SharedMemorySegment segment,
                             RingProducer producer, DistributedSampler sampler)
    : request_(options.request),
      prefetch_(std::clamp(options.prefetch, 1, options.request.slot_count)),
      eval_resize_(EvalResizeSize(options.request.image_size, options.eval_resize_ratio)),
      max_image_pixels_(options.max_image_pixels),
      exact_jpeg_(options.exact_jpeg),
      gpu_decode_share_(options.gpu_decode_share),
      trace_(options.trace),
      trace_batches_(options.trace_batches),
      trace_thread_(options.trace_thread),
      injected_decode_delay_(options.injected_decode_delay),
      bad_samples_(options.bad_samples),
      dataset_(std::move(dataset)),
      pool_(pool),
      on_error_(std::move(on_error)),
      segment_(std::move(segment)),
      producer_(std::move(producer)),
      sampler_(std::move(sampler)),
      production_thread_([this] { ProductionLoop(); }) {}

BatchProducer::~BatchProducer() { (void)Stop(absl::InfiniteFuture()); }

absl::Status BatchProducer::Stop(absl::Time deadline) {
  absl::MutexLock stop_lock(&stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (production_thread_.joinable()) production_thread_.join();
  // Samples already handed to the pool write into the ring: wait for them before the
  // segment can be unmapped. Those not started yet are skipped (cancelled_).
  cancelled_.store(true);
  while (!in_flight_.empty()) {
    const absl::Time until = std::min(deadline, absl::Now() + absl::Seconds(10));
    if (in_flight_.front()->done.WaitForNotificationWithDeadline(until)) {
      in_flight_.pop_front();
      continue;
    }
    if (absl::Now() < deadline) {
      LogWarning("rank %d: still waiting for a sample being decoded before unmapping the ring",
                 request_.rank);
      continue;
    }
    int64_t samples = 0;
    for (const std::shared_ptr<InFlightBatch>& batch : in_flight_) {
      samples += batch->remaining.load(std::memory_order_acquire);
    }
    const std::string name = segment_.name();
    if (segment_.owns_name()) (void)segment_.Unlink();
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", request_.rank, ": ", samples, " sample(s) of epoch ", in_flight_.front()->epoch,
        ", step ", in_flight_.front()->step, " still being decoded into ring ", name,
        " (its name is removed; its memory stays mapped until they end)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<EpochInfo> BatchProducer::QueueEpoch(int64_t epoch, uint64_t seed,
                                                    int64_t start_sample) {
  absl::StatusOr<std::vector<int64_t>> indices =
      sampler_.RestOfEpochIndices(seed, epoch, start_sample);
  if (!indices.ok()) return indices.status();
  EpochPlan plan;
  plan.epoch = epoch;
  plan.seed = seed;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("production stopped after an error: ", failure_.message()));
    }
    if (epoch < 0 || epoch <= last_epoch_) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epoch, " requested after epoch ", last_epoch_,
                       ": epochs must be non-negative and increasing"));
    }
    last_epoch_ = epoch;
  }
  plan.indices = std::make_shared<const std::vector<int64_t>>(*std::move(indices));
  const int64_t samples = static_cast<int64_t>(plan.indices->size());
  plan.batches = (samples + request_.batch_size - 1) / request_.batch_size;
  EpochInfo info;
  info.epoch = epoch;
  info.samples = samples;
  info.batches = plan.batches;
  if (plan.batches > 0) {
    absl::MutexLock lock(&mu_);
    queued_.push_back(std::move(plan));
  }
  return info;
}

bool BatchProducer::Traced(int64_t ordinal) const {
  if (trace_ == nullptr || !trace_->recording()) return false;
  return ordinal >= trace_batches_.first - request_.slot_count && ordinal < trace_batches_.end;
}

bool BatchProducer::StopRequested() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool BatchProducer::HasNextBatch() {
  if (next_step_ < current_.batches) return true;
  absl::MutexLock lock(&mu_);
  if (queued_.empty()) return false;
  current_ = std::move(queued_.front());
  queued_.pop_front();
  next_step_ = 0;
  return true;
}

std::shared_ptr<BatchProducer::InFlightBatch> BatchProducer::StartBatch(const WritableSlot& slot) {
  auto batch = std::make_shared<InFlightBatch>();
  batch->slot = slot;
  batch->epoch = current_.epoch;
  batch->step = next_step_;
  batch->order = current_.indices;
  batch->first = next_step_ * request_.batch_size;
  batch->count = static_cast<int32_t>(
      std::min<int64_t>(request_.batch_size, current_.indices->size() - batch->first));
  batch->remaining.store(batch->count);
  batch->options.image_size = request_.image_size;
  batch->options.train = request_.train;
  batch->options.seed = current_.seed;
  batch->options.epoch = current_.epoch;
  batch->options.eval_resize = eval_resize_;
  batch->options.max_pixels = max_image_pixels_;
  batch->options.exact_jpeg = exact_jpeg_;
  // Note [The requested GPU decode share]: read once, here, for the whole batch.
  batch->gpu_decode_share =
      gpu_decode_share_.has_value() ? *gpu_decode_share_ : producer_.RequestedGpuDecodeShare();
  if (batch->gpu_decode_share > 0.0) {
    absl::StatusOr<image::TransformSpec> spec = SampleTransform(batch->options);
    batch->spec_ok = spec.ok();
    if (spec.ok()) batch->spec = *spec;
  }
  ++next_step_;
  batch->ordinal = batches_started_++;
  batch->traced = Traced(batch->ordinal);
  if (batch->traced) batch->started_us = TraceNowMicros();
  if (bad_samples_ != nullptr) bad_samples_->AddSeen(batch->count);

  for (int32_t i = 0; i < batch->count; ++i) {
    const int64_t index = (*batch->order)[batch->first + i];
    slot.sample_indices[i] = index;
    slot.labels[i] = dataset_->Label(index);
    pool_->Submit([this, batch, i](SampleScratch& scratch) {
      if (!cancelled_.load(std::memory_order_relaxed)) ProduceSample(*batch, i, scratch);
      if (batch->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) batch->done.Notify();
    });
  }
  return batch;
}

void BatchProducer::ProduceSample(InFlightBatch& batch, int32_t i, SampleScratch& scratch) {
  const size_t image_bytes = static_cast<size_t>(request_.image_size) * request_.image_size * 3;
  uint8_t* const dst = batch.slot.images + image_bytes * i;
  const std::vector<int64_t>& order = *batch.order;
  const int64_t position = batch.first + i;
  const int64_t index = order[position];
  auto fail = [&](const absl::Status& status, int64_t failed_index, absl::string_view hint) {
    absl::MutexLock lock(&batch.mu);
    if (batch.failed_position >= 0 && batch.failed_position <= i) return;
    batch.failed_position = i;
    batch.status = absl::Status(
        status.code(),
        absl::StrCat("rank ", request_.rank, ", epoch ", batch.epoch, ", step ", batch.step, ", ",
                     dataset_->Describe(failed_index), ": ", status.message(), hint));
  };

  // Named in the shutdown's message should this read never return (a hung mount).
  WorkerPool::NoteActivity(absl::StrCat("rank ", request_.rank, ", ", dataset_->Describe(index)));
  const int64_t traced_start = batch.traced ? TraceNowMicros() : 0;
  scratch.time_stages = batch.traced;
  absl::Cleanup record = [&] {
    scratch.time_stages = false;
    if (!batch.traced) return;
    const SampleTimes& t = scratch.times;
    trace_->Complete(kDecodeTraceThreadBase + WorkerPool::CurrentWorkerIndex(), "sample", "decode",
                     traced_start, TraceNowMicros(),
                     TraceArgs()
                         .Add("file", dataset_->Describe(index))
                         .Add("bytes", t.file_bytes)
                         .Add("read_ms", t.read_us / 1e3)
                         .Add("decode_ms", t.decode_us / 1e3)
                         .Add("resize_ms", t.resize_us / 1e3)
                         .Add("rank", request_.rank)
                         .Add("epoch", batch.epoch)
                         .Add("step", batch.step));
  };
  scratch.times = SampleTimes();
  if (injected_decode_delay_ > absl::ZeroDuration()) absl::SleepFor(injected_decode_delay_);
  if (batch.spec_ok && IsGpuDecodePosition(i, batch.gpu_decode_share) &&
      TryDefer(batch, i, scratch)) {
    return;
  }
  absl::Status status = LoadSample(*dataset_, index, batch.options, scratch, dst);
  if (status.ok()) return;
  const bool skip = bad_samples_ != nullptr && bad_samples_->skips();
  if (!IsBadSampleError(status)) return fail(status, index, "");
  if (!skip) {
    if (bad_samples_ != nullptr) bad_samples_->MarkBad(index, dataset_->Describe(index), status);
    return fail(status, index,
                bad_samples_ != nullptr
                    ? " (--bad_files=fail; --bad_files=skip would replace the sample)"
                    : "");
  }
  // Note [Replacing bad samples]: the next position of the epoch's order that loads.
  bad_samples_->MarkBad(index, dataset_->Describe(index), status);
  const absl::Status why = status;
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t tries = std::min(kMaxReplacementTries, n - 1);
  for (int64_t attempt = 1; attempt <= tries; ++attempt) {
    const int64_t candidate = order[(position + attempt) % n];
    WorkerPool::NoteActivity(
        absl::StrCat("rank ", request_.rank, ", ", dataset_->Describe(candidate)));
    status = LoadSample(*dataset_, candidate, batch.options, scratch, dst);
    if (status.ok()) {
      batch.slot.sample_indices[i] = candidate;
      batch.slot.labels[i] = dataset_->Label(candidate);
      absl::Status limit = bad_samples_->CountSkip(dataset_->Describe(index), why);
      if (!limit.ok()) fail(limit, index, "");
      return;
    }
    if (!IsBadSampleError(status)) return fail(status, candidate, "");
    bad_samples_->MarkBad(candidate, dataset_->Describe(candidate), status);
  }
  fail(absl::DataLossError(absl::StrCat(why.message(), "; and no usable replacement: the next ",
                                        tries, " samples of the epoch's order are unusable too")),
       index, "");
}

bool BatchProducer::TryDefer(InFlightBatch& batch, int32_t i, SampleScratch& scratch) {
  const size_t image_bytes = static_cast<size_t>(request_.image_size) * request_.image_size * 3;
  const int64_t index = (*batch.order)[batch.first + i];
  // A sample that cannot be read is left to Load(), which fails the same way and goes
  // through the bad-sample policy.
  absl::StatusOr<absl::Span<const uint8_t>> bytes = dataset_->ReadEncoded(index, scratch);
  if (!bytes.ok()) return false;
  const image::SampleKey key{batch.options.seed, batch.options.epoch, index};
  const std::optional<DeferredSampleHeader> header =
      image::PlanDeferredJpeg(*bytes, batch.spec, key, image_bytes, nullptr,
                              request_.gpu_decode_arena_bytes != 0 ? request_.gpu_decode_arena_bytes
                                                                   : kDefaultGpuDecodeArenaBytes);
  if (!header.has_value()) {
    deferred_stats_.kept_on_cpu.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  image::WriteDeferredSample(*header, *bytes, batch.slot.images + image_bytes * i);
  batch.slot.sample_kinds[i] = static_cast<uint8_t>(SampleKind::kDeferredJpeg);
  deferred_stats_.deferred.fetch_add(1, std::memory_order_relaxed);
  return true;
}

absl::StatusOr<std::string> BatchProducer::ReportGpuDecodeFailure(int64_t epoch, int64_t index,
                                                                  absl::string_view why) {
  if (index < 0 || index >= dataset_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request_.rank,
                                                   " reported a GPU decode failure of sample ",
                                                   index, ", outside the dataset"));
  }
  const std::string description = dataset_->Describe(index);
  const absl::Status bad = MarkBadSample(
      absl::DataLossError(absl::StrCat("the trainer's GPU decoder refused it: ", why)));
  absl::Status stop;
  if (bad_samples_ == nullptr || !bad_samples_->skips()) {
    if (bad_samples_ != nullptr) bad_samples_->MarkBad(index, description, bad);
    // The file and the flag first: the control socket carries 255 bytes of message.
    stop = absl::DataLossError(absl::StrCat(
        "rank ", request_.rank, ", epoch ", epoch, ", ", description,
        bad_samples_ != nullptr ? " (--bad_files=fail; --bad_files=skip would replace the sample)"
                                : "",
        ": ", bad.message()));
  } else {
    // Note [GPU decode failures].
    bad_samples_->MarkBad(index, description, bad,
                          "another sample of its batch, on the trainer's GPU decode path");
    stop = bad_samples_->CountSkip(description, bad);
    if (stop.ok()) return description;
  }
  LogError("%s (exit %d): %s", ExitCause(ExitCodeOf(stop)), ExitCodeOf(stop), StatusText(stop));
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = stop;
    stopping_ = true;
  }
  return stop;
}

void BatchProducer::ProductionLoop() {
  std::deque<std::shared_ptr<InFlightBatch>>& in_flight = in_flight_;
  while (!StopRequested()) {
    // Start batches while a slot is free; block for one only when nothing is in flight.
    if (static_cast<int32_t>(in_flight.size()) < prefetch_ && HasNextBatch()) {
      const bool traced = Traced(batches_started_);
      const int64_t claim_start = traced ? TraceNowMicros() : 0;
      absl::StatusOr<WritableSlot> slot =
          producer_.Claim(in_flight.empty() ? kPollInterval : absl::ZeroDuration());
      if (traced && in_flight.empty()) {
        // The ring is full: the rank has not released a slot yet.
        const int64_t claimed = TraceNowMicros();
        if (claimed - claim_start >= 20) {
          trace_->Complete(trace_thread_, "waiting for a free slot", "ring", claim_start, claimed,
                           TraceArgs().Add("rank", request_.rank));
        }
      }
      if (slot.ok()) {
        in_flight.push_back(StartBatch(*slot));
        continue;
      }
      if (in_flight.empty()) continue;  // the ring is full: look at the stop flag, try again
    }
    if (!in_flight.empty()) {
      std::shared_ptr<InFlightBatch> batch = in_flight.front();
      if (!batch->done.WaitForNotificationWithTimeout(kPollInterval)) continue;
      in_flight.pop_front();
      absl::Status status;
      {
        absl::MutexLock lock(&batch->mu);
        status = batch->status;
      }
      if (status.ok()) {
        const int64_t published = batch->traced ? TraceNowMicros() : 0;
        // Batches in flight overlap: each slot is a track of its own.
        const int slot_thread = trace_thread_ + 1 + batch->slot.slot;
        if (batch->traced && batch->ordinal >= trace_batches_.first) {
          trace_->FlowStart(slot_thread, "batch",
                            RingBatchFlowId(request_.rank, batch->epoch, batch->step), published);
        }
        status = producer_.Publish(batch->slot, batch->epoch, batch->step, batch->count,
                                   batch->gpu_decode_share);
        if (batch->traced) {
          trace_->Complete(slot_thread, absl::StrCat("slot filled: step ", batch->step), "ring",
                           batch->started_us, TraceNowMicros(),
                           TraceArgs()
                               .Add("rank", request_.rank)
                               .Add("epoch", batch->epoch)
                               .Add("step", batch->step)
                               .Add("samples", batch->count)
                               .Add("published_us", published));
          if (batch->ordinal + 1 == trace_batches_.end) {
            if (absl::Status written = trace_->Write(); !written.ok()) {
              LogWarning("the trace: %s", written.message());
            }
          }
        }
      }
      if (!status.ok()) {
        // The job's first error line, often: it names the cause (common/exit_codes.h).
        LogError("%s (exit %d): %s", ExitCause(ExitCodeOf(status)), ExitCodeOf(status),
                 StatusText(status));
        {
          absl::MutexLock lock(&mu_);
          failure_ = status;
          stopping_ = true;
        }
        on_error_(status);
        break;
      }
      continue;
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](BatchProducer* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                               return self->stopping_ || !self->queued_.empty();
                             },
                             this),
                         kPollInterval);
  }
  // Stop() waits for the batches still in flight.
}

}  // namespace stoker::data_service
