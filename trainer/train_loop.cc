#include "trainer/train_loop.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data_service/ring_client.h"
#include "trainer/grad_buckets.h"
#include "trainer/models.h"

namespace stoker::trainer {
namespace {

using data_service::BatchView;
using data_service::EpochInfo;
using data_service::RingClient;
using data_service::RingRequest;

// Same weights and buffers on every rank before the first step, as DDP does.
absl::Status BroadcastModelState(ImageClassifier& model, Communicator& communicator) {
  torch::NoGradGuard no_grad;
  for (at::Tensor& p : model.parameters()) {
    RETURN_IF_ERROR(communicator.Broadcast(p.data_ptr(), p.nbytes(), 0));
  }
  for (at::Tensor& b : model.buffers()) {
    RETURN_IF_ERROR(communicator.Broadcast(b.data_ptr(), b.nbytes(), 0));
  }
  return absl::OkStatus();
}

// uint8 NHWC batch in the ring -> normalised float NCHW tensor (a new tensor: the slot can
// be released as soon as this returns).
at::Tensor NormalizeBatch(const BatchView& batch, const TrainerOptions& options) {
  const int64_t s = options.image_size;
  at::Tensor raw = at::from_blob(const_cast<uint8_t*>(batch.images), {batch.count, s, s, 3},
                                 at::TensorOptions().dtype(at::kByte));
  at::Tensor mean = at::tensor({options.mean[0], options.mean[1], options.mean[2]}) * 255.0;
  at::Tensor scale = 1.0 / (at::tensor({options.stddev[0], options.stddev[1], options.stddev[2]}) * 255.0);
  return raw.to(at::kFloat).sub_(mean).mul_(scale).permute({0, 3, 1, 2}).contiguous();
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

absl::Status Train(const TrainerOptions& options, const RankInfo& rank,
                   Communicator& communicator) {
  // CPU ranks share the node's cores.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, cores / std::max(1, rank.local_size)));

  torch::manual_seed(options.seed);
  ASSIGN_OR_RETURN(std::shared_ptr<ImageClassifier> model,
                   MakeModel(options.model, options.num_classes));
  RETURN_IF_ERROR(BroadcastModelState(*model, communicator));

  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) {
    names.push_back(item.key());
    parameters.push_back(item.value());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GradBuckets> buckets,
                   GradBuckets::Create(parameters, names, options.bucket_bytes, &communicator));
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(options.learning_rate)
                                              .momentum(options.momentum)
                                              .weight_decay(options.weight_decay));

  RingRequest request;
  request.rank = rank.rank;
  request.world_size = rank.world_size;
  request.batch_size = options.batch_size;
  request.image_size = options.image_size;
  request.slot_count = options.ring_slots;
  ASSIGN_OR_RETURN(std::unique_ptr<RingClient> ring,
                   RingClient::Connect(options.data_socket, request, options.data_timeout));

  // Rank 0 owns the seed: every rank and so every data service uses its value.
  uint64_t seed = options.seed;
  RETURN_IF_ERROR(communicator.Broadcast(&seed, sizeof(seed), 0));
  ASSIGN_OR_RETURN(EpochInfo epoch_info, ring->StartEpoch(0, seed));

  const auto start = std::chrono::steady_clock::now();
  int64_t images_seen = 0;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    // Ask for the next epoch now, so its first batches are ready at the boundary.
    EpochInfo next_info;
    if (epoch + 1 < options.epochs) {
      ASSIGN_OR_RETURN(next_info, ring->StartEpoch(epoch + 1, seed));
    }
    model->train();
    for (int64_t step = 0; step < epoch_info.batches; ++step) {
      ASSIGN_OR_RETURN(BatchView batch, ring->Acquire(options.data_timeout));
      if (batch.epoch != epoch || batch.step != step) {
        return absl::InternalError(absl::StrCat("ring delivered epoch ", batch.epoch, " step ",
                                                batch.step, ", expected ", epoch, " ", step));
      }
      at::Tensor images = NormalizeBatch(batch, options);
      at::Tensor labels = at::from_blob(const_cast<int32_t*>(batch.labels), {batch.count},
                                        at::TensorOptions().dtype(at::kInt))
                              .to(at::kLong);
      RETURN_IF_ERROR(ring->Release(batch));

      buckets->ZeroGrad();
      buckets->BeginStep(/*reduce=*/true);
      at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
      loss.backward();
      RETURN_IF_ERROR(buckets->FinishStep());
      optimizer.step();
      images_seen += static_cast<int64_t>(batch.count) * rank.world_size;

      const bool last = step + 1 == epoch_info.batches;
      if ((step + 1) % options.log_every == 0 || last) {
        float mean_loss = loss.item<float>();
        RETURN_IF_ERROR(communicator.AllReduce(&mean_loss, 1, ElementType::kFloat32,
                                               ReduceOp::kAverage));
        if (rank.rank == 0) {
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          LogInfo("epoch %d/%d step %d/%d loss %.4f  %.1f images/s", epoch + 1, options.epochs,
                  step + 1, epoch_info.batches, mean_loss, images_seen / std::max(seconds, 1e-9));
        }
      }
    }
    epoch_info = next_info;
  }
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
  if (o.data_socket.empty()) return absl::InvalidArgumentError("--data_socket is required");
  if (o.batch_size < 1) return bad("batch_size", o.batch_size, "must be >= 1");
  if (o.image_size < 8) return bad("image_size", o.image_size, "must be >= 8");
  if (o.epochs < 1) return bad("epochs", o.epochs, "must be >= 1");
  if (o.num_classes < 1) return bad("num_classes", o.num_classes, "must be >= 1");
  if (!(o.learning_rate > 0)) return bad("lr", o.learning_rate, "must be > 0");
  if (o.momentum < 0 || o.momentum >= 1) return bad("momentum", o.momentum, "must be in [0, 1)");
  if (o.weight_decay < 0) return bad("weight_decay", o.weight_decay, "must be >= 0");
  if (o.bucket_bytes < 1024) return bad("bucket_mb", o.bucket_bytes, "bucket must be >= 1 KiB");
  if (o.ring_slots < 2) return bad("ring_slots", o.ring_slots, "must be >= 2");
  if (o.log_every < 1) return bad("log_every", o.log_every, "must be >= 1");
  return absl::OkStatus();
}

absl::Status RunTraining(const TrainerOptions& options, const RankInfo& rank,
                         Communicator& communicator) {
  RETURN_IF_ERROR(ValidateOptions(options));
  try {
    return Train(options, rank, communicator);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what_without_backtrace()));
  }
}

}  // namespace stoker::trainer
