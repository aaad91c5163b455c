// BatchProducer: fills one trainer rank's ring. It owns the rank's shared-memory segment,
// turns each requested epoch into that rank's DistributedSampler indices, and produces
// batches in (epoch, step) order, decoding the samples of several batches at once on the
// shared WorkerPool, each straight into its place in the ring slot. Epochs queued ahead
// follow without a gap: the first batches of epoch e+1 are decoded while the trainer
// still consumes the last ones of epoch e.
#ifndef STOKER_DATA_SERVICE_BATCH_PRODUCER_H_
#define STOKER_DATA_SERVICE_BATCH_PRODUCER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_segment.h"
#include "common/trace_events.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/dataset/dataset.h"
#include "data_service/dataset/sampler.h"
#include "data_service/ring/ring.h"
#include "data_service/ring/wire_types.h"
#include "data_service/worker_pool.h"

namespace stoker::data_service {

struct BatchProducerOptions {
  std::string segment_name;  // "/stoker.<job>.ring.<rank>"
  RingRequest request;
  // Batches of this ring decoded at the same time (1..slot_count; larger is clamped).
  int32_t prefetch = 2;
  // Evaluation Resize() = round(image_size * eval_resize_ratio) (>= 1).
  double eval_resize_ratio = kDefaultEvalResizeRatio;
  // Decompression-bomb limit: images of more pixels are unusable samples.
  int64_t max_image_pixels = image::kDefaultMaxPixels;
  bool exact_jpeg = false;  // SampleOptions::exact_jpeg
  // Share of each batch's samples, in [0, 1], whose JPEG the trainer decodes on its GPU
  // (Note [Deferred samples] in data_service/image/deferred_jpeg.h), the same for every
  // batch whatever the trainer asks for; nullopt (--gpu_decode_share=auto): each batch
  // takes the share the ring's consumer requests when the batch starts (Note [The
  // requested GPU decode share] in data_service/ring/ring.h).
  std::optional<double> gpu_decode_share;
  // The dataset's bad-sample policy and memory (Note [Replacing bad samples]); shared by
  // the producers of one split and outliving them. Null: every failing sample stops
  // production, as --bad_files=fail does.
  BadSampleTracker* bad_samples = nullptr;
  // The trace (--trace, common/trace_events.h): this ring's batches `trace_batches`
  // (counted from its first, 0-based), and the slot_count batches decoded ahead of them,
  // are recorded into `trace` (null: none) while it records: each sample on its decode
  // thread (file, bytes, read, decode and resize time), and on `trace_thread` each slot
  // filled (to its publication, a flow to the rank that takes it; thread trace_thread + 1 +
  // the slot) and each wait for a free slot. After the window's last batch the trace file
  // is written.
  TraceRecorder* trace = nullptr;
  TraceSteps trace_batches;
  int trace_thread = 0;
  // For tests only (Note [Injected decode delay] in data_service/service.h): every sample
  // waits this long before it is decoded.
  absl::Duration injected_decode_delay = absl::ZeroDuration();
};

// The trace's threads of a data service: decode thread i is kDecodeTraceThreadBase + i; the
// training ring of rank r has kRingTraceThreadBase * (r + 1) and the slot_count after it.
inline constexpr int kDecodeTraceThreadBase = 100;
inline constexpr int kRingTraceThreadBase = 1000;

// InvalidArgument, naming the flag, unless `eval_resize_ratio` is in [1, 8] and
// `max_image_pixels` is positive (BatchProducerOptions' and ServiceOptions' fields).
absl::Status CheckImageOptions(double eval_resize_ratio, int64_t max_image_pixels);

// InvalidArgument, naming the flag, unless `share` is in [0, 1] (or nullopt).
absl::Status CheckGpuDecodeShare(double share);
absl::Status CheckGpuDecodeShare(const std::optional<double>& share);

// Whether position `i` of a batch is one the trainer is asked to decode, for a share
// `share` of each batch: exactly floor(n * share) of the first n positions are, spread
// evenly (position i is when floor((i + 1) * share) > floor(i * share)). A pure function
// of (i, share), so batches do not depend on timing or the thread count.
bool IsGpuDecodePosition(int32_t i, double share);

// Counts of one producer's deferred samples (Note [Deferred samples]).
struct DeferredStats {
  std::atomic<int64_t> deferred{0};     // written as JPEG for the trainer
  std::atomic<int64_t> kept_on_cpu{0};  // at a GPU position but decoded here (not eligible)
};

// Note [GPU decode failures]
// A deferred sample that the trainer's GPU decoder refuses (corrupt tables or entropy-coded
// data, which the marker walk of ParseJpegFrame() does not read) is a bad file found after
// its batch left the service. The trainer reports it on the control socket
// (RingClient::ReportBadSample) and waits for the answer, and the service applies the CPU
// path's policy with the CPU path's counters (BadSampleTracker): the file is marked bad
// (warned about once, by its name, and counted among the bad files); with
// --bad_files=skip its replacement counts as a skipped sample toward --max_bad_fraction,
// and DataLoss past it; with --bad_files=fail the answer is the error, naming the file,
// that stops the run. The replacement itself is the trainer's, since the batch has left
// the service: the refused sample's place takes another sample of the same batch (Note
// [Replacing samples the GPU cannot decode] in trainer/input/cuda_batch_feeder.cc).

// Produces one rank's batches into its ring. QueueEpoch() is thread-safe; production runs
// on a member thread ("production thread"), its samples on the shared pool. Batches are
// bit-identical whatever the pool size: each sample is a pure function of (dataset,
// index, seed, epoch) written to its own place, and a bad sample's replacement depends
// only on the epoch's order (Note [Replacing bad samples]). Stop() ends production and
// waits, up to a deadline, for the samples being decoded; the destructor stops, waits
// for them as long as it takes, and unmaps and unlinks the ring.
//
//   ASSIGN_OR_RETURN(auto producer, BatchProducer::Create(options, dataset, &pool, on_error));
//   ASSIGN_OR_RETURN(EpochInfo info, producer->QueueEpoch(0, seed));
class BatchProducer {
 public:
  // Called once, from the production thread, when a sample fails (and is not replaced);
  // production stops.
  using ErrorCallback = std::function<void(const absl::Status&)>;

  // Checks the request (InvalidArgument, the message says which field), creates and
  // initialises the ring (ResourceExhausted if /dev/shm has no room, AlreadyExists if the
  // segment exists) and starts the production thread.
  static absl::StatusOr<std::unique_ptr<BatchProducer>> Create(
      const BatchProducerOptions& options, std::shared_ptr<const Dataset> dataset, WorkerPool* pool,
      ErrorCallback on_error);
  ~BatchProducer();
  BatchProducer(const BatchProducer&) = delete;
  BatchProducer& operator=(const BatchProducer&) = delete;

  // Queues `epoch` with sampler seed `seed`, from `start_sample` samples of its global
  // order on (Note [The rest of an epoch] in data_service/dataset/sampler.h; 0: the whole
  // epoch); its batches, numbered from step 0, follow those of the epochs queued before.
  // InvalidArgument unless epoch >= 0 and greater than every epoch queued before, and
  // start_sample in 0..dataset size-1; FailedPrecondition after a production error.
  absl::StatusOr<EpochInfo> QueueEpoch(int64_t epoch, uint64_t seed, int64_t start_sample = 0);

  // The number of samples of the dataset this producer samples from.
  int64_t dataset_size() const { return sampler_.options().dataset_size; }

  // Ends production (samples not yet started are skipped) and waits until `deadline` for
  // the samples being decoded, which write into the ring. OK when none is left (then, and
  // on later calls, the destructor does not wait). DeadlineExceeded, naming the rank, the
  // ring and how many samples are still being decoded, when some are: the ring's name is
  // removed from /dev/shm at once, but its mapping, and so this object, must live until
  // they end (Note [Abandoned decodes at shutdown] in data_service/service.h).
  absl::Status Stop(absl::Time deadline);

  // The trainer could not decode sample `index`, delivered in `epoch` as a deferred JPEG
  // (`why` says what its decoder reported): applies the bad-data policy to it as to a file
  // the CPU path cannot use (Note [GPU decode failures]). Returns the sample's description
  // (naming its file) when the run goes on; DataLoss, naming the file, when the policy
  // stops it (--bad_files=fail, or past --max_bad_fraction), and production stops too.
  // InvalidArgument for an index outside the dataset. Thread-safe.
  absl::StatusOr<std::string> ReportGpuDecodeFailure(int64_t epoch, int64_t index,
                                                     absl::string_view why);

  const std::string& segment_name() const { return segment_.name(); }
  size_t ring_bytes() const { return segment_.size(); }
  const RingLayout& layout() const { return producer_.layout(); }
  const DeferredStats& deferred_stats() const { return deferred_stats_; }

 private:
  struct EpochPlan {
    int64_t epoch = 0;
    uint64_t seed = 0;
    std::shared_ptr<const std::vector<int64_t>> indices;  // the rank's order; shared with tasks
    int64_t batches = 0;
  };
  struct InFlightBatch;

  BatchProducer(const BatchProducerOptions& options, std::shared_ptr<const Dataset> dataset,
                WorkerPool* pool, ErrorCallback on_error, SharedMemorySegment segment,
                RingProducer producer, DistributedSampler sampler);

  void ProductionLoop();
  // Production thread only: makes `current_` an epoch with batches left, if there is one.
  bool HasNextBatch();
  std::shared_ptr<InFlightBatch> StartBatch(const WritableSlot& slot);
  // Worker thread: produces position `i` of `batch`, replacing a bad sample if the
  // policy says so; records the first failure in the batch.
  void ProduceSample(InFlightBatch& batch, int32_t i, SampleScratch& scratch);
  // Worker thread: writes position `i` of `batch` as a deferred sample if the dataset
  // has its encoded bytes and they qualify (Note [Deferred samples]); false when the
  // sample is to be decoded here instead.
  bool TryDefer(InFlightBatch& batch, int32_t i, SampleScratch& scratch);
  bool StopRequested();
  // Whether batch `ordinal` of this ring (0-based, in production order) is traced.
  bool Traced(int64_t ordinal) const;

  const RingRequest request_;
  const int32_t prefetch_;
  const int32_t eval_resize_;
  const int64_t max_image_pixels_;
  const bool exact_jpeg_;
  const std::optional<double> gpu_decode_share_;  // nullopt: the consumer's request
  TraceRecorder* const trace_;
  const TraceSteps trace_batches_;
  const int trace_thread_;
  const absl::Duration injected_decode_delay_;
  BadSampleTracker* const bad_samples_;
  const std::shared_ptr<const Dataset> dataset_;
  WorkerPool* const pool_;
  const ErrorCallback on_error_;
  SharedMemorySegment segment_;
  RingProducer producer_;  // points into segment_; production thread only
  const DistributedSampler sampler_;

  DeferredStats deferred_stats_;

  // Set when the producer is being destroyed: samples not yet started are skipped.
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  std::deque<EpochPlan> queued_ ABSL_GUARDED_BY(mu_);
  int64_t last_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);

  // Production thread only; after it is joined, Stop()'s (under stop_mu_).
  EpochPlan current_;
  int64_t next_step_ = 0;
  int64_t batches_started_ = 0;  // of every epoch, for the trace window
  std::deque<std::shared_ptr<InFlightBatch>> in_flight_;

  absl::Mutex stop_mu_;  // serialises Stop()

  std::thread production_thread_;  // last: joined first
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_BATCH_PRODUCER_H_
