// The trainer program: one MPI rank, on its own GPU when the node has one (else the CPU).
// Flags describe the run; see --help.
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "launcher/node_data_service.h"
#include "launcher/rank_setup.h"
#include "trainer/mpi_communicator.h"
#include "trainer/train_loop.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "trainer/nccl_communicator.h"
#endif

ABSL_FLAG(std::string, data_socket, "", "Unix socket of this node's data service. Empty (and no --synthetic_steps): each node's local rank 0 starts the node's data service itself.");
ABSL_FLAG(std::string, job_id, "", "Without --data_socket: the job id naming the node data services' sockets and segments; rank 0's value counts; empty: rank 0 makes one.");
ABSL_FLAG(std::string, data_service, "", "Without --data_socket: the data_service program; default: next to the trainer, or ../data_service/data_service.");
ABSL_FLAG(std::string, data_service_args, "", "Without --data_socket: more data service flags, split on spaces (e.g. \"--dataset=imagefolder --train_dir=/data/train\").");
ABSL_FLAG(int, ranks_per_node, 0, "0: a node is a host (ranks sharing memory). N: ranks [kN, (k+1)N) form node k, each with its own data service (testing several nodes on one host).");
ABSL_FLAG(std::string, sample_log, "", "If set, each rank writes `epoch step index...` for every trained batch to PATH.rank<r>.");
ABSL_FLAG(std::string, model, "small_cnn", "Model: small_cnn, resnet18 or resnet50.");
ABSL_FLAG(int, num_classes, 10, "Number of classes of the dataset.");
ABSL_FLAG(int, image_size, 32, "Square image size in pixels fed to the model.");
ABSL_FLAG(int, batch_size, 32, "Batch size per rank.");
ABSL_FLAG(int, epochs, 1, "Number of epochs.");
ABSL_FLAG(std::string, optimizer, "sgd", "Optimizer: sgd (momentum, weight decay) or adamw.");
ABSL_FLAG(double, lr, 0.1, "Learning rate.");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum.");
ABSL_FLAG(double, weight_decay, 0.0, "SGD weight decay.");
ABSL_FLAG(uint64_t, seed, 0, "Base seed for weights, sampling order and augmentation; rank 0's value wins.");
ABSL_FLAG(int, bucket_mb, 25, "Gradient bucket size in MiB.");
ABSL_FLAG(std::string, data_split, "train", "Which split to train on: train (with augmentation) or val (evaluation transform).");
ABSL_FLAG(bool, drop_last_batch, true, "Skip each epoch's short last batch, so that every step has one shape (cudnn.benchmark tunes once).");
ABSL_FLAG(int, ring_slots, 4, "Batches in flight in this rank's shared-memory ring (>= 3).");
ABSL_FLAG(int, log_every, 10, "Steps between progress lines (rank 0).");
ABSL_FLAG(int, data_timeout_s, 120, "Seconds to wait for a batch before failing.");
ABSL_FLAG(std::string, final_params_out, "", "If set, each rank writes its final parameters to PATH.rank<r>.");
ABSL_FLAG(std::string, device, "auto", "auto (a GPU per local rank when there are GPUs), cuda or cpu.");
ABSL_FLAG(std::string, precision, "bf16", "Autocast precision on the GPU: bf16, fp16 (with loss scaling) or fp32 (AMP off).");
ABSL_FLAG(bool, channels_last, true, "Keep conv weights and inputs in channels_last layout.");
ABSL_FLAG(bool, cudnn_benchmark, true, "Let cuDNN time its kernels for the (fixed) input shape.");
ABSL_FLAG(double, init_scale, 65536.0, "fp16 loss scaler: initial scale.");
ABSL_FLAG(double, growth_factor, 2.0, "fp16 loss scaler: growth factor.");
ABSL_FLAG(double, backoff_factor, 0.5, "fp16 loss scaler: backoff factor.");
ABSL_FLAG(int, growth_interval, 2000, "fp16 loss scaler: steps without inf/NaN before growing.");
ABSL_FLAG(double, cache_release_fraction, 0.9, "Release cached device blocks when reserved memory passes this share of the GPU.");
ABSL_FLAG(int, synthetic_steps, 0, "Benchmark: reuse one batch made on the device for this many steps per epoch; no data service.");
ABSL_FLAG(int, warmup_steps, 10, "Steps left out of the throughput figure.");
ABSL_FLAG(bool, data_only, false, "Benchmark the input pipeline: fetch, copy and normalise batches, train nothing.");
ABSL_FLAG(std::string, metrics_out, "", "If set, rank 0 writes a JSON summary of the run here.");
ABSL_FLAG(std::string, loss_log, "", "If set, rank 0 writes `epoch step loss` for every step here (syncs each step).");

namespace {

using stoker::trainer::Precision;

absl::StatusOr<stoker::trainer::TrainerOptions> OptionsFromFlags() {
  stoker::trainer::TrainerOptions options;
  options.data_socket = absl::GetFlag(FLAGS_data_socket);
  options.model = absl::GetFlag(FLAGS_model);
  options.num_classes = absl::GetFlag(FLAGS_num_classes);
  options.image_size = absl::GetFlag(FLAGS_image_size);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.optimizer = absl::GetFlag(FLAGS_optimizer);
  options.learning_rate = absl::GetFlag(FLAGS_lr);
  options.momentum = absl::GetFlag(FLAGS_momentum);
  options.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.bucket_bytes = static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_bucket_mb))) << 20;
  options.ring_slots = absl::GetFlag(FLAGS_ring_slots);
  options.drop_last_batch = absl::GetFlag(FLAGS_drop_last_batch);
  const std::string split = absl::GetFlag(FLAGS_data_split);
  if (split != "train" && split != "val") {
    return absl::InvalidArgumentError(absl::StrCat("--data_split=", split, ": use train or val"));
  }
  options.train_split = split == "train";
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.data_timeout = absl::Seconds(absl::GetFlag(FLAGS_data_timeout_s));
  options.final_params_out = absl::GetFlag(FLAGS_final_params_out);
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision == "bf16") {
    options.precision = Precision::kBFloat16;
  } else if (precision == "fp16") {
    options.precision = Precision::kFloat16;
  } else if (precision == "fp32") {
    options.precision = Precision::kFloat32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--precision=", precision, ": use bf16, fp16 or fp32"));
  }
  options.channels_last = absl::GetFlag(FLAGS_channels_last);
  options.cudnn_benchmark = absl::GetFlag(FLAGS_cudnn_benchmark);
  options.init_scale = absl::GetFlag(FLAGS_init_scale);
  options.growth_factor = absl::GetFlag(FLAGS_growth_factor);
  options.backoff_factor = absl::GetFlag(FLAGS_backoff_factor);
  options.growth_interval = absl::GetFlag(FLAGS_growth_interval);
  options.cache_release_fraction = absl::GetFlag(FLAGS_cache_release_fraction);
  options.synthetic_steps = absl::GetFlag(FLAGS_synthetic_steps);
  options.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  options.data_only = absl::GetFlag(FLAGS_data_only);
  options.metrics_out = absl::GetFlag(FLAGS_metrics_out);
  options.loss_log = absl::GetFlag(FLAGS_loss_log);
  options.sample_log = absl::GetFlag(FLAGS_sample_log);
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "auto" && device != "cuda" && device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device=", device, ": use auto, cuda or cpu"));
  }
  // Without --data_socket the node's local rank 0 starts the data service after MPI start-up
  // and sets it (launcher/node_data_service.h); check the rest now.
  stoker::trainer::TrainerOptions checked = options;
  if (checked.data_socket.empty()) checked.data_socket = "(started by local rank 0)";
  RETURN_IF_ERROR(stoker::trainer::ValidateOptions(checked));
  return options;
}

// Binds this rank to GPU `local_rank` and creates its CUDA context there before any other
// CUDA call, so that no rank ever opens a context on another rank's GPU. Returns whether
// the rank trains on a GPU.
absl::StatusOr<bool> BindDevice(const std::string& device, const stoker::launcher::RankInfo& rank) {
  if (device == "cpu") return false;
#ifdef STOKER_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count == 0) {
    if (device == "cuda") return absl::FailedPreconditionError("--device=cuda but no GPU is visible");
    return false;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  ASSIGN_OR_RETURN(const int gpu, stoker::launcher::GpuForLocalRank(rank, count, visible != nullptr ? visible : ""));
  RETURN_IF_ERROR(stoker::CudaStatus(cudaSetDevice(gpu), "cudaSetDevice"));
  RETURN_IF_ERROR(stoker::CudaStatus(cudaFree(nullptr), "creating the CUDA context"));
  return true;
#else
  if (device == "cuda") return absl::FailedPreconditionError("--device=cuda but this build has no CUDA");
  (void)rank;
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Stoker trainer: one MPI rank. Usually started by `launcher`.");
  absl::ParseCommandLine(argc, argv);
  stoker::SetLogIdentity("trainer");
  absl::StatusOr<stoker::trainer::TrainerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    stoker::LogError("%s", options.status().message());
    return 2;
  }

  stoker::launcher::RankSetupOptions rank_setup;
  rank_setup.ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node);
  auto session = stoker::launcher::MpiSession::Create(&argc, &argv, rank_setup);
  if (!session.ok()) {
    stoker::LogError("MPI start-up failed: %s", session.status().message());
    return 1;
  }
  const stoker::launcher::RankInfo& rank = (*session)->info();
  stoker::SetLogIdentity(absl::StrCat("trainer rank ", rank.rank));

  // No --data_socket: each node's local rank 0 runs the node's data service (Note [Data
  // service per node]). Started before any CUDA call, and stopped after training.
  std::unique_ptr<stoker::launcher::NodeDataService> node_data_service;
  if (options->data_socket.empty() && options->synthetic_steps == 0) {
    stoker::launcher::NodeDataServiceOptions service_options;
    service_options.program = absl::GetFlag(FLAGS_data_service);
    service_options.job_id = absl::GetFlag(FLAGS_job_id);
    service_options.seed = options->seed;
    service_options.args = absl::StrSplit(absl::GetFlag(FLAGS_data_service_args), ' ', absl::SkipEmpty());
    service_options.ready_timeout = options->data_timeout;
    auto started = stoker::launcher::NodeDataService::Start(rank, (*session)->world(), (*session)->node(), service_options);
    if (!started.ok()) {
      stoker::LogError("%s", started.status().ToString());
      (*session)->Abort(1);
    }
    node_data_service = std::move(*started);
    options->data_socket = node_data_service->socket_path();
  }

  absl::Status status;
  {
    std::unique_ptr<stoker::trainer::Communicator> communicator;
    absl::StatusOr<bool> use_cuda = BindDevice(absl::GetFlag(FLAGS_device), rank);
    if (!use_cuda.ok()) {
      status = use_cuda.status();
    } else if (*use_cuda) {
#ifdef STOKER_WITH_CUDA
      options->use_cuda = true;
      options->cuda_device = rank.local_rank;
      auto nccl = stoker::trainer::NcclCommunicator::Create((*session)->world(), rank.local_rank);
      if (nccl.ok()) communicator = std::move(*nccl);
      status = nccl.status();
#endif
    } else {
      auto mpi = stoker::trainer::MpiCommunicator::Create((*session)->world());
      if (mpi.ok()) communicator = std::move(*mpi);
      status = mpi.status();
    }
    if (status.ok()) status = stoker::trainer::RunTraining(*options, rank, *communicator);
    if (status.ok() && node_data_service != nullptr) status = node_data_service->Stop();
    if (!status.ok()) {
      stoker::LogError("%s", status.ToString());
      // Local rank 0: stop the node's data service and remove what it left (also when it
      // died), before the abort ends this process.
      node_data_service.reset();
      // The other ranks may be waiting in a collective: end the whole job now.
      (*session)->Abort(1);
    }
  }
  if (rank.rank == 0) stoker::LogInfo("training finished");
  return 0;
}
