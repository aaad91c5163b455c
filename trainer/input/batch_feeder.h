// BatchFeeder: turns the host batches of a data-service ring into normalised model
// input on the training device. The CPU feeder normalises on the host; the CUDA feeder
// (cuda_batch_feeder.h) copies with non-blocking copies from pinned memory on a copy
// stream and normalises on the GPU.
#ifndef STOKER_TRAINER_INPUT_BATCH_FEEDER_H_
#define STOKER_TRAINER_INPUT_BATCH_FEEDER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data_service/ring/ring_client.h"

namespace stoker::trainer {

// Where host batches come from: the data service's ring (RingClient), or a test's fake.
// Acquire, Release and ReportBadSample are called from one thread at a time.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual absl::StatusOr<data_service::BatchView> Acquire(absl::Duration timeout) = 0;
  virtual absl::Status Release(const data_service::BatchView& batch) = 0;
  // Sample `sample_index` of `epoch` could not be decoded here (`why`): the data service's
  // bad-data policy counts it (RingClient::ReportBadSample). The sample's description
  // when the run goes on; the policy's error when it stops the run.
  virtual absl::StatusOr<std::string> ReportBadSample(int64_t epoch, int64_t sample_index,
                                                      absl::string_view why) = 0;
  // The host memory that batches live in (registered with CUDA when possible).
  virtual void* memory_base() const = 0;
  virtual size_t memory_bytes() const = 0;
};

// A BatchSource over a RingClient, which it does not own.
class RingBatchSource final : public BatchSource {
 public:
  explicit RingBatchSource(data_service::RingClient* ring) : ring_(ring) {}
  absl::StatusOr<data_service::BatchView> Acquire(absl::Duration timeout) override {
    return ring_->Acquire(timeout);
  }
  absl::Status Release(const data_service::BatchView& batch) override {
    return ring_->Release(batch);
  }
  absl::StatusOr<std::string> ReportBadSample(int64_t epoch, int64_t sample_index,
                                              absl::string_view why) override {
    return ring_->ReportBadSample(epoch, sample_index, why);
  }
  void* memory_base() const override { return ring_->ring_base(); }
  size_t memory_bytes() const override { return ring_->ring_bytes(); }

 private:
  data_service::RingClient* ring_;
};

struct FeederOptions {
  int batch_size = 0;
  int image_size = 0;
  at::ScalarType dtype = at::kFloat;  // of the normalised images
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float stddev[3] = {0.229f, 0.224f, 0.225f};
  absl::Duration timeout = absl::Seconds(120);  // for one batch to arrive
  // Batches may hold deferred samples (a GPU decode share above 0, or adaptive): the CUDA
  // feeder makes its JPEG decoder at start, not in the middle of training.
  bool gpu_decode = false;
  // The bound on the JPEG decoder's device arena (Note [The GPU decode arena] in
  // data_service/image/deferred_jpeg.h): the ring's RingRequest::gpu_decode_arena_bytes.
  uint64_t gpu_decode_arena_bytes = data_service::kDefaultGpuDecodeArenaBytes;
};

// One batch on the training device. `images` is [count, 3, H, W] in channels_last
// layout; `labels` is int64 [count].
struct TrainingBatch {
  at::Tensor images;
  at::Tensor labels;
  int64_t epoch = 0;
  int64_t step = 0;
  int32_t count = 0;
  absl::Duration data_wait;  // how long Next() waited for the data service
  // How long the GPU stood idle waiting for input, summed over the batches whose wait
  // became known since the last batch (it lags a batch or two); absent from a feeder that
  // cannot see the GPU (Note [The GPU's wait for input] in cuda_batch_feeder.cc).
  std::optional<absl::Duration> gpu_input_wait;
  // The share of GPU decode positions the data service produced the batch with (Note [The
  // requested GPU decode share] in data_service/ring/ring.h); 0 for synthetic batches.
  double gpu_decode_share = 0.0;
  // The dataset index of each sample (host memory; empty for synthetic batches): lets
  // validation count each sample once although the sampler pads by wrap-around.
  std::vector<int64_t> sample_indices;
};

// A batch as its ring slot describes it: epoch, step, count, GPU decode share and a copy of
// the sample indices; no tensors or waits yet.
TrainingBatch BatchOfSlot(const data_service::BatchView& view);

// Owned by the training thread.
class BatchFeeder {
 public:
  virtual ~BatchFeeder() = default;
  // The next batch in (epoch, step) order. For a device feeder, the tensors are ready
  // for work enqueued on the current stream.
  virtual absl::StatusOr<TrainingBatch> Next() = 0;
};

// Normalises on the host and releases each slot before returning.
std::unique_ptr<BatchFeeder> MakeCpuBatchFeeder(BatchSource* source, const FeederOptions& options);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_BATCH_FEEDER_H_
