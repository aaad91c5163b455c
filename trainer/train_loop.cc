#include "trainer/train_loop.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data_service/ring_client.h"
#include "trainer/batch_feeder.h"
#include "trainer/fused_optimizer.h"
#include "trainer/grad_buckets.h"
#include "trainer/models.h"
#include "trainer/nn/loss_scaler.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "trainer/cuda_batch_feeder.h"
#endif

namespace stoker::trainer {
namespace {

using data_service::EpochInfo;
using data_service::RingClient;
using data_service::RingRequest;

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Same weights and buffers on every rank before the first step, as DDP does.
absl::Status BroadcastModelState(ImageClassifier& model, Communicator& communicator) {
  torch::NoGradGuard no_grad;
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
  FixedBatchFeeder(TrainingBatch batch, int steps_per_epoch)
      : batch_(std::move(batch)), steps_per_epoch_(steps_per_epoch) {}
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
  int64_t next_ = 0;
};

at::ScalarType InputType(const TrainerOptions& o) {
  if (!o.use_cuda || o.precision == Precision::kFloat32) return at::kFloat;
  return o.precision == Precision::kBFloat16 ? at::kBFloat16 : at::kHalf;
}

// Device memory, as the article asks to watch it: what tensors hold, what the caching
// allocator keeps, the peak. Releases cached blocks past the configured share.
void ReportDeviceMemory(const TrainerOptions& o, const launcher::RankInfo& rank, bool log) {
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

absl::Status Train(const TrainerOptions& options, const launcher::RankInfo& rank,
                   Communicator& communicator) {
  const at::Device device = options.use_cuda ? at::Device(at::kCUDA, options.cuda_device)
                                             : at::Device(at::kCPU);
  if (!options.use_cuda) {
    // CPU ranks share the node's cores.
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, cores / std::max(1, rank.local_size)));
  } else {
    at::globalContext().setBenchmarkCuDNN(options.cudnn_benchmark);
  }

  torch::manual_seed(options.seed);
  ASSIGN_OR_RETURN(std::shared_ptr<ImageClassifier> model,
                   MakeModel(options.model, options.num_classes));
  model->to(device);
  if (options.channels_last) {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : model->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  RETURN_IF_ERROR(BroadcastModelState(*model, communicator));

  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) {
    names.push_back(item.key());
    parameters.push_back(item.value());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GradBuckets> buckets,
                   GradBuckets::Create(parameters, names, options.bucket_bytes, &communicator));
  OptimizerOptions optimizer_options;
  optimizer_options.kind = options.optimizer;
  optimizer_options.learning_rate = options.learning_rate;
  optimizer_options.momentum = options.momentum;
  optimizer_options.weight_decay = options.weight_decay;
  ASSIGN_OR_RETURN(std::unique_ptr<FusedOptimizer> optimizer,
                   FusedOptimizer::Create(parameters, optimizer_options));
  // Loss scaling guards fp16 gradients against underflow; bf16 and fp32 do not need it.
  LossScalerOptions scaler_options;
  scaler_options.init_scale = options.init_scale;
  scaler_options.growth_factor = options.growth_factor;
  scaler_options.backoff_factor = options.backoff_factor;
  scaler_options.growth_interval = options.growth_interval;
  scaler_options.enabled = options.use_cuda && options.precision == Precision::kFloat16;
  ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::Create(scaler_options));
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters) grads.push_back(p.grad());
  int64_t skipped_steps = 0;

  std::ofstream loss_log;
  if (rank.rank == 0 && !options.loss_log.empty()) {
    loss_log.open(options.loss_log, std::ios::trunc);
    if (!loss_log) return absl::InvalidArgumentError(absl::StrCat("--loss_log: cannot write ", options.loss_log));
  }

  std::ofstream sample_log;
  if (!options.sample_log.empty()) {
    const std::string path = absl::StrCat(options.sample_log, ".rank", rank.rank);
    sample_log.open(path, std::ios::trunc);
    if (!sample_log) return absl::InvalidArgumentError(absl::StrCat("--sample_log: cannot write ", path));
  }

  FeederOptions feeder_options;
  feeder_options.batch_size = options.batch_size;
  feeder_options.image_size = options.image_size;
  feeder_options.dtype = InputType(options);
  std::copy(options.mean, options.mean + 3, feeder_options.mean);
  std::copy(options.stddev, options.stddev + 3, feeder_options.stddev);
  feeder_options.timeout = options.data_timeout;

  // Declared in dependency order: the feeder uses the source, which uses the ring.
  std::unique_ptr<RingClient> ring;
  std::unique_ptr<BatchSource> source;
  std::unique_ptr<BatchFeeder> feeder;
  int64_t steps_per_epoch = options.synthetic_steps;
  EpochInfo next_epoch;
  uint64_t seed = options.seed;
  if (options.synthetic_steps > 0) {
    TrainingBatch batch;
    const int64_t s = options.image_size;
    batch.images = at::randn({options.batch_size, 3, s, s},
                             at::TensorOptions().device(device).dtype(feeder_options.dtype))
                       .contiguous(at::MemoryFormat::ChannelsLast);
    batch.labels = at::randint(0, options.num_classes, {options.batch_size},
                               at::TensorOptions().device(device).dtype(at::kLong));
    batch.count = options.batch_size;
    feeder = std::make_unique<FixedBatchFeeder>(std::move(batch), options.synthetic_steps);
  } else {
    RingRequest request;
    request.rank = rank.rank;
    request.world_size = rank.world_size;
    request.batch_size = options.batch_size;
    request.image_size = options.image_size;
    request.slot_count = options.ring_slots;
    request.train = options.train_split;
    ASSIGN_OR_RETURN(ring, RingClient::Connect(options.data_socket, request, options.data_timeout));
    source = std::make_unique<RingBatchSource>(ring.get());
    // Rank 0 owns the seed: every rank and so every data service uses its value. (The
    // communicator works on the training device's memory.)
    at::Tensor seed_tensor =
        at::tensor({static_cast<int64_t>(options.seed)}, at::TensorOptions().dtype(at::kLong)).to(device);
    RETURN_IF_ERROR(communicator.Broadcast(seed_tensor.data_ptr(), sizeof(int64_t), 0));
    RETURN_IF_ERROR(communicator.Synchronize());
    seed = static_cast<uint64_t>(seed_tensor.item<int64_t>());
    ASSIGN_OR_RETURN(EpochInfo first, ring->StartEpoch(0, seed));
    steps_per_epoch = first.batches;
    if (options.use_cuda) {
#ifdef STOKER_WITH_CUDA
      ASSIGN_OR_RETURN(feeder, MakeCudaBatchFeeder(source.get(), feeder_options, options.cuda_device));
#endif
    } else {
      feeder = MakeCpuBatchFeeder(source.get(), feeder_options);
    }
  }

  const bool autocast = options.use_cuda && options.precision != Precision::kFloat32;
  if (autocast) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, feeder_options.dtype);
  }

  Clock::time_point measure_start = Clock::now();
  absl::Duration data_wait_measured;
  int64_t images_measured = 0;
  int64_t global_step = 0;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    // Ask for the next epoch now, so that its first batches are ready at the boundary.
    if (ring != nullptr && epoch + 1 < options.epochs) {
      ASSIGN_OR_RETURN(next_epoch, ring->StartEpoch(epoch + 1, seed));
    }
    model->train();
    for (int64_t step = 0; step < steps_per_epoch; ++step, ++global_step) {
      if (global_step == options.warmup_steps) {
        if (options.use_cuda) ReportDeviceMemory(options, rank, /*log=*/rank.local_rank == 0);
        measure_start = Clock::now();
        data_wait_measured = absl::ZeroDuration();
        images_measured = 0;
      }
      ASSIGN_OR_RETURN(TrainingBatch batch, feeder->Next());
      if (batch.epoch != epoch || batch.step != step) {
        return absl::InternalError(absl::StrCat("the data service delivered epoch ", batch.epoch,
                                                " step ", batch.step, ", expected ", epoch, " ", step));
      }
      data_wait_measured += batch.data_wait;
      if (options.drop_last_batch && batch.count < options.batch_size) continue;
      if (sample_log.is_open()) {
        sample_log << epoch << " " << step;
        for (int64_t index : batch.sample_indices) sample_log << " " << index;
        sample_log << "\n";
      }
      if (options.data_only) {
        images_measured += static_cast<int64_t>(batch.count) * rank.world_size;
        continue;
      }

      buckets->ZeroGrad();
      buckets->BeginStep(/*reduce=*/true);
      at::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(batch.images), batch.labels);
      if (autocast) at::autocast::clear_cache();
      scaler.Scale(loss).backward();
      RETURN_IF_ERROR(buckets->FinishStep());
      if (scaler.enabled()) {
        // Every rank holds the same averaged gradients, so every rank skips the same steps.
        RETURN_IF_ERROR(scaler.Unscale(grads));
        RETURN_IF_ERROR(scaler.Step([&] {
          optimizer->Step();
          return absl::OkStatus();
        }));
        skipped_steps += scaler.StepSkipped();
        RETURN_IF_ERROR(scaler.Update());
      } else {
        optimizer->Step();
      }
      if (loss_log.is_open()) loss_log << epoch << " " << step << " " << loss.item<float>() << "\n";
      images_measured += static_cast<int64_t>(batch.count) * rank.world_size;

      const bool last = step + 1 == steps_per_epoch;
      if ((step + 1) % options.log_every == 0 || last) {
        at::Tensor mean_loss = loss.detach().to(at::kFloat).reshape({1}).clone();
        RETURN_IF_ERROR(communicator.AllReduce(mean_loss.data_ptr(), 1, ElementType::kFloat32,
                                               ReduceOp::kAverage));
        RETURN_IF_ERROR(communicator.Synchronize());
        const float value = mean_loss.item<float>();
        if (rank.rank == 0) {
          const double seconds = std::max(Seconds(Clock::now() - measure_start), 1e-9);
          LogInfo("epoch %d/%d step %d/%d loss %.4f  %.1f images/s  data wait %.1f%%", epoch + 1,
                  options.epochs, step + 1, steps_per_epoch, value, images_measured / seconds,
                  100.0 * absl::ToDoubleSeconds(data_wait_measured) / seconds);
        }
      }
    }
  }
  if (options.use_cuda) {
#ifdef STOKER_WITH_CUDA
    RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
#endif
  }
  const double seconds = std::max(Seconds(Clock::now() - measure_start), 1e-9);
  const double images_per_second = images_measured / seconds;
  const double data_wait_share = absl::ToDoubleSeconds(data_wait_measured) / seconds;
  if (rank.rank == 0) {
    LogInfo("done: %.1f images/s over %d ranks after %d warm-up steps; data wait %.1f%% of the time",
            images_per_second, rank.world_size, options.warmup_steps, 100 * data_wait_share);
    if (scaler.enabled()) {
      LogInfo("fp16 loss scale %.0f; %d step(s) skipped for inf/NaN gradients", scaler.scale(),
              static_cast<int>(skipped_steps));
    }
    if (!options.metrics_out.empty()) {
      std::ofstream out(options.metrics_out, std::ios::trunc);
      out << absl::StrFormat(
          "{\"model\": \"%s\", \"world_size\": %d, \"batch_size\": %d, \"image_size\": %d, "
          "\"synthetic\": %s, \"images_per_second\": %.2f, \"data_wait_share\": %.4f, "
          "\"data_only\": %s, \"measured_steps\": %d}\n",
          options.model, rank.world_size, options.batch_size, options.image_size,
          options.synthetic_steps > 0 ? "true" : "false", images_per_second, data_wait_share,
          options.data_only ? "true" : "false", global_step - options.warmup_steps);
    }
  }
  if (options.use_cuda) ReportDeviceMemory(options, rank, /*log=*/rank.local_rank == 0);
  if (!options.final_params_out.empty()) {
    RETURN_IF_ERROR(
        WriteParameters(*model, absl::StrCat(options.final_params_out, ".rank", rank.rank)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptions(const TrainerOptions& o) {
  auto bad = [](absl::string_view flag, auto value, absl::string_view need) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", need));
  };
  if (o.data_socket.empty() && o.synthetic_steps == 0) {
    return absl::InvalidArgumentError("--data_socket is required (or --synthetic_steps)");
  }
  if (o.batch_size < 1) return bad("batch_size", o.batch_size, "must be >= 1");
  if (o.image_size < 8) return bad("image_size", o.image_size, "must be >= 8");
  if (o.epochs < 1) return bad("epochs", o.epochs, "must be >= 1");
  if (o.num_classes < 1) return bad("num_classes", o.num_classes, "must be >= 1");
  if (!(o.learning_rate > 0)) return bad("lr", o.learning_rate, "must be > 0");
  if (o.optimizer != "sgd" && o.optimizer != "adamw") return bad("optimizer", o.optimizer, "use sgd or adamw");
  if (o.momentum < 0 || o.momentum >= 1) return bad("momentum", o.momentum, "must be in [0, 1)");
  if (o.weight_decay < 0) return bad("weight_decay", o.weight_decay, "must be >= 0");
  if (o.bucket_bytes < 1024) return bad("bucket_mb", o.bucket_bytes, "bucket must be >= 1 KiB");
  if (o.ring_slots < 3) return bad("ring_slots", o.ring_slots, "must be >= 3");
  if (o.log_every < 1) return bad("log_every", o.log_every, "must be >= 1");
  if (o.synthetic_steps < 0) return bad("synthetic_steps", o.synthetic_steps, "must be >= 0");
  if (o.warmup_steps < 0) return bad("warmup_steps", o.warmup_steps, "must be >= 0");
  if (!(o.cache_release_fraction > 0 && o.cache_release_fraction <= 1)) {
    return bad("cache_release_fraction", o.cache_release_fraction, "must be in (0, 1]");
  }
  return absl::OkStatus();
}

absl::Status RunTraining(const TrainerOptions& options, const launcher::RankInfo& rank,
                         Communicator& communicator) {
  RETURN_IF_ERROR(ValidateOptions(options));
  try {
    return Train(options, rank, communicator);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what_without_backtrace()));
  }
}

}  // namespace stoker::trainer
