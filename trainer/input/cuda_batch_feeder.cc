#include "trainer/input/cuda_batch_feeder.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda_status.h"
#include "common/cuda_stream.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/input/gpu_decode_refusals.h"
#include "trainer/input/gpu_jpeg_decoder.h"
#include "trainer/input/normalize_kernel.h"

namespace stoker::trainer {
namespace {

// Note [Slot release after copy]
// A ring slot goes back to the data service only once the copy reading it has completed
// (its event has fired): the producer rewrites a released slot at once, and a copy still
// in flight would then read half-new bytes. The prefetch thread waits for that event, not
// the training thread, so the wait costs the step nothing; the copy itself overlaps the
// previous step's compute because it runs on its own stream.

// Note [Pinning and the locked-memory limit]
// cudaHostRegister does not count against RLIMIT_MEMLOCK: measured on an H200 (driver
// 580, Linux 6.18) as an unprivileged user without CAP_IPC_LOCK under `ulimit -l 0`, it
// registered 256 MiB of /dev/shm memory (and 1 GiB under a 64 KiB limit), and VmLck and
// VmPin stayed 0. So a low `ulimit -l` needs neither an error nor a fallback here (it
// does matter to InfiniBand registration by NCCL and MPI). A registration that fails for
// another reason is the documented fallback: a warning that says what it costs, and
// pageable copies (CudaFeederStats::pinned is false).

// Note [Replacing samples the GPU cannot decode]
// The data service defers only JPEGs whose markers the hardware decoder takes, so a
// deferred sample that nvJPEG still refuses (corrupt tables or entropy data that a marker
// walk cannot see) is a bad file found late, when the batch has left the service. It goes
// to the service's bad-data policy all the same (RouteRefusedSamples, Note [GPU decode
// failures] in data_service/batch_producer.h): counted with the CPU path's counters toward
// --max_bad_fraction, its file named once in the service's log, and the run stopped, with
// the policy's error, under --bad_files=fail. When the policy lets the run go on, the
// sample is replaced by the next position of the same batch (cyclically) that is not
// refused itself: its pixels, label and index are copied into the refused one's place on
// the copy stream, and the failure is counted (CudaFeederStats::gpu_decode_failures). So
// the batch keeps its size and stays a pure function of the batch's contents. A batch
// whose samples are all refused is an error.

// Note [The GPU's wait for input]
// The host's wait in Next() says little about the GPU: with CUDA graphs the training thread
// runs steps ahead of the GPU, and waits in Next() while the GPU still works through the
// queued steps. So Next() also times the GPU's own wait, with two timing events on the
// compute stream: one recorded when Next() is called, which the GPU reaches once it has
// done the work queued before it (the previous step), and one after the compute stream's
// wait for the batch's copy. The time between them is how long the GPU stood idle for this
// batch: for the host to get it, then for its copy and GPU decode. A GPU that is behind the
// host passes the first event late and waits little or nothing. The events are read when
// the GPU has passed them, without waiting: each batch carries the waits that completed
// since the batch before (TrainingBatch::gpu_input_wait).

// The two events that time the GPU's wait for one batch.
struct InputWaitTimer {
  CudaEvent asked;  // on the compute stream when Next() is called
  CudaEvent fed;    // on the compute stream after its wait for the batch's copy
};

// Page-locks a host range with cudaHostRegister for the life of the object.
class PinnedHostRange {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedHostRange>> Register(void* base, size_t bytes) {
    RETURN_IF_CUDA_ERROR(cudaHostRegister(base, bytes, cudaHostRegisterDefault));
    return std::unique_ptr<PinnedHostRange>(new PinnedHostRange(base, bytes));
  }
  // Unregisters before the ring is unmapped (its owner outlives this object); a failure is
  // reported, since the driver would keep the pages locked.
  ~PinnedHostRange() {
    if (const cudaError_t error = cudaHostUnregister(base_); error != cudaSuccess) {
      LogWarning("cudaHostUnregister of the ring's %zu bytes at %p before unmapping it: %s (%s)",
                 bytes_, base_, cudaGetErrorName(error), cudaGetErrorString(error));
    }
  }

 private:
  PinnedHostRange(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  void* base_;
  size_t bytes_;
};

// A device staging buffer for one batch, with the events that order its reuse.
struct Staging {
  at::Tensor images;   // uint8 [batch * H * W * 3]
  at::Tensor labels;   // int32 [batch]
  CudaEvent copied;    // on the copy stream, after the copy into it
  CudaEvent consumed;  // on the compute stream, after the normalise from it
};

// A batch copied into staging buffer `buffer`: its facts, before its tensors are made.
struct Ready {
  int buffer = -1;
  TrainingBatch batch;
};

class CudaBatchFeeder final : public BatchFeeder {
 public:
  CudaBatchFeeder(BatchSource* source, const FeederOptions& options, int device,
                  CudaFeederStats* stats)
      : source_(source), options_(options), device_(device), stats_(stats) {}

  ~CudaBatchFeeder() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (prefetch_thread_.joinable()) prefetch_thread_.join();
    if (copy_stream_.get() != nullptr) cudaStreamSynchronize(copy_stream_.get());
    if (decoder_ != nullptr) LogDecoderTotals();
    // The members go in reverse order: the staging buffers and their events, the copy
    // stream, the pinned range.
  }

  absl::Status Start() {
    RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
    auto pinned = PinnedHostRange::Register(source_->memory_base(), source_->memory_bytes());
    if (pinned.ok()) {
      pinned_ = std::move(*pinned);
    } else {
      cudaGetLastError();  // clear the sticky-free error of the refused registration
      // Note [Pinning and the locked-memory limit].
      LogWarning(
          "could not page-lock the data ring (%d MiB) with cudaHostRegister: %s. Training "
          "goes on with pageable copies: each batch copy is synchronous (it no longer overlaps "
          "compute) at about a quarter of the bandwidth. The locked-memory limit (ulimit -l) "
          "is not the cause: the NVIDIA driver pins without RLIMIT_MEMLOCK. Look for host "
          "memory that cannot be pinned (too little free RAM, a VM or WSL that refuses to "
          "register shared memory).",
          static_cast<int>(source_->memory_bytes() >> 20), pinned.status().message());
    }
    if (stats_ != nullptr) stats_->pinned = pinned_ != nullptr;
    ASSIGN_OR_RETURN(copy_stream_, CudaStream::Create(device_, cudaStreamNonBlocking));
    const int64_t s = options_.image_size;
    const at::TensorOptions device_options = at::TensorOptions().device(at::kCUDA, device_);
    for (int i = 0; i < kBuffers; ++i) {
      Staging& staging = staging_[i];
      RETURN_IF_ERROR(TorchCall("CUDA feeder: allocating the staging buffers", [&] {
        staging.images =
            at::empty({options_.batch_size * s * s * 3}, device_options.dtype(at::kByte));
        staging.labels = at::empty({options_.batch_size}, device_options.dtype(at::kInt));
      }));
      ASSIGN_OR_RETURN(staging.copied,
                       CudaEvent::Create(cudaEventDisableTiming | cudaEventBlockingSync));
      ASSIGN_OR_RETURN(staging.consumed, CudaEvent::Create(cudaEventDisableTiming));
    }
    {
      absl::MutexLock lock(&mu_);
      for (int i = 0; i < kBuffers; ++i) free_.push_back(i);
    }
    if (options_.gpu_decode) RETURN_IF_ERROR(MakeDecoder());
    // The staging buffers were allocated on the current stream: let that work finish
    // before the copy stream writes into them.
    RETURN_IF_CUDA_ERROR(cudaDeviceSynchronize());
    prefetch_thread_ = std::thread([this] { PrefetchLoop(); });
    return absl::OkStatus();
  }

  absl::StatusOr<TrainingBatch> Next() override {
    const absl::Time start = absl::Now();
    cudaStream_t compute = nullptr;
    RETURN_IF_ERROR(TorchCall("CUDA feeder: the current stream", [&] {
      compute = c10::cuda::getCurrentCUDAStream(device_).stream();
    }));
    ASSIGN_OR_RETURN(InputWaitTimer timer, TakeTimer());
    RETURN_IF_ERROR(timer.asked.Record(compute));
    Ready ready;
    {
      absl::MutexLock lock(&mu_);
      auto has_batch = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !ready_.empty() || !prefetch_status_.ok();
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&has_batch), options_.timeout)) {
        return absl::DeadlineExceededError(absl::StrCat("no batch from the data service within ",
                                                        absl::FormatDuration(options_.timeout)));
      }
      if (ready_.empty()) return prefetch_status_;
      ready = std::move(ready_.front());
      ready_.pop_front();
    }
    TrainingBatch batch = std::move(ready.batch);
    batch.data_wait = absl::Now() - start;
    Staging& staging = staging_[ready.buffer];
    RETURN_IF_ERROR(TorchCall("CUDA feeder: normalising a batch", [&]() -> absl::Status {
      RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(compute, staging.copied.get(), 0));
      RETURN_IF_ERROR(timer.fed.Record(compute));
      const int64_t s = options_.image_size;
      batch.images = at::empty({batch.count, 3, s, s},
                               at::TensorOptions().device(at::kCUDA, device_).dtype(options_.dtype),
                               at::MemoryFormat::ChannelsLast);
      ASSIGN_OR_RETURN(NormalizedType type, TypeOf(options_.dtype));
      RETURN_IF_CUDA_ERROR(LaunchNormalizeU8(staging.images.data_ptr<uint8_t>(),
                                             batch.images.data_ptr(), batch.count * s * s, type,
                                             options_.mean, options_.stddev, compute));
      batch.labels = staging.labels.narrow(0, 0, batch.count).to(at::kLong);
      RETURN_IF_CUDA_ERROR(cudaEventRecord(staging.consumed.get(), compute));
      return absl::OkStatus();
    }));
    {
      absl::MutexLock lock(&mu_);
      free_.push_back(ready.buffer);
    }
    timing_.push_back(std::move(timer));
    ASSIGN_OR_RETURN(batch.gpu_input_wait, CompletedInputWaits());
    return batch;
  }

 private:
  // What the GPU decoder did over the feeder's life; the host times are Note [Decoding waits
  // on the host] in gpu_jpeg_decoder.cc.
  void LogDecoderTotals() const {
    const GpuDecodeTimes times = decoder_->times();
    if (times.batches > 0) {
      LogInfo(
          "GPU %d decode: %lld batches, %lld of them re-initialising nvJPEG's batch; %.3f ms "
          "of host time per batch in nvJPEG (longest %.2f ms)",
          device_, static_cast<long long>(times.batches),
          static_cast<long long>(times.initializations), times.host_ms / times.batches,
          times.longest_host_ms);
    }
    LogInfo(
        "GPU %d decoded %lld deferred samples with nvJPEG's %s backend; %lld refused (counted "
        "by the data service's bad-data policy, which names their files); %lld of the decoded "
        "ones left by the JPEG engines to the CUDA backend",
        device_, static_cast<long long>(gpu_decoded_), decoder_->hardware() ? "hardware" : "CUDA",
        static_cast<long long>(gpu_refused_),
        static_cast<long long>(decoder_->cuda_backend_decodes()));
  }

  static constexpr int kBuffers = 2;

  static absl::StatusOr<NormalizedType> TypeOf(at::ScalarType dtype) {
    switch (dtype) {
      case at::kFloat:
        return NormalizedType::kFloat32;
      case at::kHalf:
        return NormalizedType::kFloat16;
      case at::kBFloat16:
        return NormalizedType::kBFloat16;
      default:
        return absl::InvalidArgumentError("input dtype must be float32, float16 or bfloat16");
    }
  }

  // Training thread: a timer from the spares, or a new one.
  absl::StatusOr<InputWaitTimer> TakeTimer() {
    if (!spare_timers_.empty()) {
      InputWaitTimer timer = std::move(spare_timers_.back());
      spare_timers_.pop_back();
      return timer;
    }
    InputWaitTimer timer;
    ASSIGN_OR_RETURN(timer.asked, CudaEvent::Create(cudaEventDefault));
    ASSIGN_OR_RETURN(timer.fed, CudaEvent::Create(cudaEventDefault));
    return timer;
  }

  // Training thread: the sum of the waits, oldest first, that the GPU has passed (Note [The
  // GPU's wait for input]); their timers go back to the spares.
  absl::StatusOr<absl::Duration> CompletedInputWaits() {
    absl::Duration total;
    while (!timing_.empty()) {
      ASSIGN_OR_RETURN(bool passed, timing_.front().fed.Query());
      if (!passed) break;
      ASSIGN_OR_RETURN(float ms, timing_.front().fed.ElapsedMs(timing_.front().asked));
      total += absl::Milliseconds(std::max(0.0f, ms));
      spare_timers_.push_back(std::move(timing_.front()));
      timing_.pop_front();
    }
    return total;
  }

  // Owned by prefetch_thread_: the only user of source_ after Start().
  void PrefetchLoop() {
    absl::Status status = CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
    while (status.ok()) {
      int buffer = -1;
      {
        absl::MutexLock lock(&mu_);
        auto can_go = [this]()
                          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !free_.empty(); };
        mu_.Await(absl::Condition(&can_go));
        if (stopping_) return;
        buffer = free_.front();
        free_.pop_front();
      }
      status = CopyOne(buffer);
    }
    absl::MutexLock lock(&mu_);
    prefetch_status_ = status;
  }

  absl::Status CopyOne(int buffer) {
    // Wait in short slices so that the destructor is never held up for long.
    absl::StatusOr<data_service::BatchView> view = absl::DeadlineExceededError("");
    const absl::Time deadline = absl::Now() + options_.timeout;
    while (true) {
      view = source_->Acquire(absl::Milliseconds(100));
      if (view.ok() || view.status().code() != absl::StatusCode::kDeadlineExceeded) break;
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("feeder stopping");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("no batch from the data service within ",
                                                        absl::FormatDuration(options_.timeout)));
      }
    }
    RETURN_IF_ERROR(view.status());
    Staging& staging = staging_[buffer];
    const size_t image_bytes =
        static_cast<size_t>(view->count) * options_.image_size * options_.image_size * 3;
    RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(copy_stream_.get(), staging.consumed.get(), 0));
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(staging.images.data_ptr(), view->images, image_bytes,
                                         cudaMemcpyHostToDevice, copy_stream_.get()));
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(staging.labels.data_ptr(), view->labels,
                                         view->count * sizeof(int32_t), cudaMemcpyHostToDevice,
                                         copy_stream_.get()));
    Ready ready{buffer, BatchOfSlot(*view)};
    if (view->deferred_count > 0) {
      absl::Status decoded = DecodeDeferred(*view, staging, ready);
      if (!decoded.ok()) {
        // The slot may still be read by work on the copy stream: let it finish first.
        cudaStreamSynchronize(copy_stream_.get());
        (void)source_->Release(*view);
        return decoded;
      }
    }
    RETURN_IF_CUDA_ERROR(cudaEventRecord(staging.copied.get(), copy_stream_.get()));
    // See Note [Slot release after copy]: this covers the deferred samples' decode too.
    RETURN_IF_CUDA_ERROR(cudaEventSynchronize(staging.copied.get()));
    RETURN_IF_ERROR(source_->Release(*view));
    absl::MutexLock lock(&mu_);
    ready_.push_back(std::move(ready));
    if (stats_ != nullptr) ++stats_->batches_copied;
    return absl::OkStatus();
  }

  // In Start() (before the prefetch thread), or on the prefetch thread at the first deferred
  // sample.
  absl::Status MakeDecoder() {
    ASSIGN_OR_RETURN(decoder_,
                     GpuJpegDecoder::Create(device_, options_.batch_size, options_.image_size,
                                            options_.gpu_decode_arena_bytes));
    if (stats_ != nullptr) stats_->gpu_decode_hardware = decoder_->hardware();
    return absl::OkStatus();
  }

  // Prefetch thread: decodes the deferred samples of `view` into `staging` on the copy
  // stream, after the batch's copy, and hands those nvJPEG refuses to the bad-data policy
  // (Note [Replacing samples the GPU cannot decode]).
  absl::Status DecodeDeferred(const data_service::BatchView& view, Staging& staging, Ready& ready) {
    if (decoder_ == nullptr) RETURN_IF_ERROR(MakeDecoder());
    uint8_t* images = staging.images.data_ptr<uint8_t>();
    ASSIGN_OR_RETURN(std::vector<RefusedJpeg> refused,
                     decoder_->Decode(view, images, copy_stream_.get()));
    gpu_decoded_ += view.deferred_count - static_cast<int64_t>(refused.size());
    gpu_refused_ += static_cast<int64_t>(refused.size());
    if (stats_ != nullptr) {
      stats_->gpu_decoded = gpu_decoded_;
      stats_->gpu_decode_failures = gpu_refused_;
    }
    if (refused.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        std::vector<SampleReplacement> replacements,
        RouteRefusedSamples(view, refused, [&](int64_t sample_index, absl::string_view why) {
          return source_->ReportBadSample(view.epoch, sample_index, why);
        }));
    const size_t sample_bytes = static_cast<size_t>(options_.image_size) * options_.image_size * 3;
    int32_t* labels = staging.labels.data_ptr<int32_t>();
    std::vector<int64_t>& indices = ready.batch.sample_indices;
    for (const SampleReplacement& r : replacements) {
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(images + sample_bytes * r.refused,
                                           images + sample_bytes * r.with, sample_bytes,
                                           cudaMemcpyDeviceToDevice, copy_stream_.get()));
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(labels + r.refused, labels + r.with, sizeof(int32_t),
                                           cudaMemcpyDeviceToDevice, copy_stream_.get()));
      if (!indices.empty()) indices[r.refused] = indices[r.with];
    }
    return absl::OkStatus();
  }

  BatchSource* source_;
  const FeederOptions options_;
  const int device_;
  CudaFeederStats* stats_;
  std::unique_ptr<PinnedHostRange> pinned_;
  CudaStream copy_stream_;                   // created in Start()
  std::unique_ptr<GpuJpegDecoder> decoder_;  // see MakeDecoder(); used by the prefetch thread
  int64_t gpu_decoded_ = 0;                  // prefetch thread
  int64_t gpu_refused_ = 0;                  // prefetch thread
  Staging staging_[kBuffers];  // their events are recorded on copy_stream_ and the compute stream
  std::deque<InputWaitTimer> timing_;         // training thread: recorded, not yet read
  std::vector<InputWaitTimer> spare_timers_;  // training thread

  absl::Mutex mu_;
  std::deque<int> free_ ABSL_GUARDED_BY(mu_);     // staging buffers the prefetcher may fill
  std::deque<Ready> ready_ ABSL_GUARDED_BY(mu_);  // copied batches, in order
  absl::Status prefetch_status_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread prefetch_thread_;  // declared last: joined first (in the destructor)
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchFeeder>> MakeCudaBatchFeeder(BatchSource* source,
                                                                 const FeederOptions& options,
                                                                 int device,
                                                                 CudaFeederStats* stats) {
  auto feeder = std::make_unique<CudaBatchFeeder>(source, options, device, stats);
  RETURN_IF_ERROR(feeder->Start());
  return feeder;
}

}  // namespace stoker::trainer
