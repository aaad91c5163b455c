#include "trainer/training_model.h"

#include <ATen/Context.h>
#include <c10/core/GradMode.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/seed_mix.h"
#include "common/status_macros.h"
#include "trainer/cuda_graph.h"
#include "trainer/device.h"
#include "trainer/model_registry.h"
#include "trainer/nn/state_dict.h"
#include "trainer/nn/state_dict_file.h"
#include "trainer/nn/sync_batch_norm.h"

namespace stoker::trainer {
namespace {

// --sync_batchnorm's group: the run's gradient communicator, as nn/ sees ranks.
class CommunicatorBatchNormGroup final : public BatchNormGroup {
 public:
  explicit CommunicatorBatchNormGroup(Communicator* communicator) : communicator_(communicator) {}

  absl::Status AllReduceSum(torch::Tensor& t) override {
    RETURN_IF_ERROR(
        communicator_->AllReduce(t.data_ptr(), t.numel(), ElementType::kFloat32, ReduceOp::kSum));
    return communicator_->Synchronize();
  }

 private:
  Communicator* communicator_;  // not owned; outlives the training model
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingModel>> TrainingModel::Create(const TrainerOptions& o,
                                                                     const RunContext& context,
                                                                     Communicator& gradients) {
  // Loss scaling guards fp16 gradients against underflow; bf16 and fp32 do not need it.
  LossScalerOptions scaler_options = o.scaler;
  scaler_options.enabled = context.use_cuda && o.device.precision == Precision::kFloat16;
  ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::Create(scaler_options));
  std::unique_ptr<TrainingModel> t(new TrainingModel(std::move(scaler)));

  // Note [Sync batch norm] (trainer/nn/sync_batch_norm.h): its allreduces are not made
  // capture-safe, so --sync_batchnorm runs the step uncaptured.
  const bool sync_batchnorm = o.model.sync_batchnorm && context.world_size() > 1;
  if (sync_batchnorm && context.use_cuda && o.step.cuda_graphs && context.rank0()) {
    LogInfo("--sync_batchnorm: the step runs uncaptured (as --nocuda_graphs)");
  }
  const bool cuda_graphs = context.use_cuda && o.step.cuda_graphs && !sync_batchnorm;
  if (sync_batchnorm) t->sync_group_ = std::make_unique<CommunicatorBatchNormGroup>(&gradients);
  SetSyncBatchNormGroup(t->sync_group_.get());
  if (cuda_graphs) RETURN_IF_ERROR(UseCapturableStream());  // before the model and its buckets
  at::manual_seed(o.seed);
  GraphModelOptions model_options;
  model_options.num_classes = o.model.num_classes;
  model_options.image_size = o.input.image_size;
  model_options.fused_blocks = o.model.fused_blocks;
  model_options.fp8 = context.use_cuda && o.device.precision == Precision::kFp8;
  model_options.fp8_recipe.history = o.device.fp8_amax_history;
  ASSIGN_OR_RETURN(t->model_, MakeModel(o.model.name, model_options));
  if (!o.model.init_weights.empty()) {
    StateDictFileOptions file_options;
    file_options.allow_pickle = o.model.allow_pickle;
    ASSIGN_OR_RETURN(auto state, ReadStateDictFile(o.model.init_weights, file_options));
    RETURN_IF_ERROR(
        LoadStateDict(state, *t->model_, absl::StrCat("--init_weights=", o.model.init_weights)));
  }
  t->model_->to(TrainingDevice(context));
  if (o.device.channels_last) {
    // Note [Channels-last weights]: every 4-D weight gets channels-last strides, including
    // those whose shape is contiguous in both layouts ([C, 1, k, k] depthwise, [Co, Ci, 1, 1]),
    // on which `contiguous(ChannelsLast)` changes nothing. A convolution takes its output's
    // layout from its input's or its weight's stride order, so these weights make a
    // convolution whose input lost the layout (a channel shuffle's `contiguous` + `view`)
    // give channels-last again, as `module.to(memory_format=torch.channels_last)` does in
    // PyTorch; otherwise the rest of the network runs in NCHW (NCHW batch-norm and
    // depthwise kernels, layout conversions around cuDNN).
    c10::NoGradGuard no_grad;
    for (at::Tensor& p : t->model_->parameters()) {
      if (p.dim() == 4 && p.suggest_memory_format() != at::MemoryFormat::ChannelsLast)
        p.set_data(at::empty_like(p, at::MemoryFormat::ChannelsLast).copy_(p));
    }
  }
  std::vector<at::Tensor> parameters;  // registration order
  std::vector<std::string> names;
  for (const auto& item : t->model_->named_parameters()) {
    names.push_back(item.key());
    parameters.push_back(item.value());
  }
  Communicator* reducing = &gradients;
  // The CPU's step profile and trace move the reductions' time from backward to waiting.
  if ((o.report.profile_steps > 0 || !o.report.trace_dir.empty()) && !context.use_cuda) {
    t->timed_ = std::make_unique<TimedCommunicator>(&gradients);
    reducing = t->timed_.get();
  }
  ASSIGN_OR_RETURN(t->buckets_,
                   GradBuckets::Create(parameters, names, o.comm.bucket_bytes(), reducing,
                                       /*fixed_addresses=*/cuda_graphs));

  // Biases and normalisation parameters (one dimension) without decay, if asked.
  std::vector<ParameterGroup> groups(2);
  groups[0].weight_decay = o.optimizer.weight_decay;
  groups[1].weight_decay = o.optimizer.no_decay_bn_bias ? 0.0 : o.optimizer.weight_decay;
  std::vector<std::string> not_decayed;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const bool exempt = o.optimizer.no_decay_bn_bias && parameters[i].dim() <= 1;
    groups[exempt ? 1 : 0].parameters.push_back(parameters[i]);
    (exempt ? not_decayed : t->optimizer_names_).push_back(names[i]);
  }
  t->optimizer_names_.insert(t->optimizer_names_.end(), not_decayed.begin(), not_decayed.end());
  ASSIGN_OR_RETURN(t->optimizer_, FusedOptimizer::Create(std::move(groups), o.optimizer));
  if (cuda_graphs) t->optimizer_->KeepLearningRateOnDevice();

  TrainStepOptions step_options;
  step_options.label_smoothing = o.step.label_smoothing;
  step_options.clip_grad_norm = o.step.clip_grad_norm;
  step_options.autocast = UsesAutocast(o.device, context);
  step_options.cuda_graphs = cuda_graphs;
  t->step_ = std::make_unique<TrainStep>(*t->model_, *t->buckets_, *t->optimizer_, t->scaler_,
                                         std::move(parameters), step_options);
  return t;
}

TrainingModel::~TrainingModel() { SetSyncBatchNormGroup(nullptr); }

void TrainingModel::SeedRandomOps(uint64_t run_seed, int rank, int64_t step) {
  const uint64_t seed_and_rank =
      SplitMix64Mix(SplitMix64Mix(run_seed) ^ static_cast<uint64_t>(rank));
  model_->SetRandomSeed(SplitMix64Mix(seed_and_rank ^ static_cast<uint64_t>(step)));
}

std::string RunIdentity(const TrainerOptions& o) {
  return absl::StrCat("model=", o.model.name, " num_classes=", o.model.num_classes,
                      " image_size=", o.input.image_size, " seed=", o.seed);
}

RunGeometry GeometryOf(const TrainerOptions& o, int world_size, uint64_t seed) {
  RunGeometry g;
  g.model = o.model.name;
  g.num_classes = o.model.num_classes;
  g.image_size = o.input.image_size;
  g.world_size = world_size;
  g.batch_size = o.input.batch_size;
  g.accumulate = o.step.accumulate;
  g.optimizer = std::string(OptimizerKindName(o.optimizer.kind));
  g.seed = seed;
  return g;
}

absl::Status TrainingModel::BroadcastState(Communicator& communicator) {
  c10::NoGradGuard no_grad;
  for (at::Tensor& p : model_->parameters())
    RETURN_IF_ERROR(communicator.Broadcast(p.data_ptr(), p.nbytes(), 0));
  for (at::Tensor& b : model_->buffers())
    RETURN_IF_ERROR(communicator.Broadcast(b.data_ptr(), b.nbytes(), 0));
  return communicator.Synchronize();
}

// Note [Running statistics as DDP keeps them]
// DDP (broadcast_buffers=True, its default) broadcasts rank 0's buffers before every
// forward pass, so whatever reads the running statistics reads rank 0's. They are read only
// in eval mode (validation), by checkpoints and by --export; training-mode batch norm
// normalises with the batch's own statistics and only writes the running ones. Stoker lets
// each rank update its own running statistics from its shard during training and
// broadcasts rank 0's buffers at the three points that read them: before validation,
// before a checkpoint is encoded and before the weights are exported. What is read there
// equals DDP's values exactly (rank 0's buffers after rank 0's updates, which depend on
// rank 0's inputs and the shared parameters only), the model that validation measures is
// the model that is saved, and no collective runs per step. Unlike a per-forward
// broadcast it needs nothing inside the captured CUDA graphs: the broadcast writes the
// buffers in place, outside any capture, and the graphs keep their addresses.
// The FP8 scaling state (--precision=fp8) is per rank in the same way (each rank's amaxes
// are of its own shard's values and gradients) and is broadcast with the buffers, so that
// the checkpoint holds the state every rank continues from: a run resumed from it, on any
// number of ranks, continues as the run that wrote it did.
absl::Status TrainingModel::SyncBuffers(Communicator& communicator) {
  if (communicator.world_size() == 1) return absl::OkStatus();
  c10::NoGradGuard no_grad;
  for (at::Tensor& b : model_->buffers()) {
    if (!b.is_contiguous()) {
      return absl::FailedPreconditionError("SyncBuffers: a buffer is not contiguous");
    }
    RETURN_IF_ERROR(communicator.Broadcast(b.data_ptr(), b.nbytes(), 0));
  }
  for (const auto& fp8 : model_->Fp8States()) {
    const at::Tensor& scaling = fp8->scaling();
    if (scaling.defined()) {
      RETURN_IF_ERROR(communicator.Broadcast(scaling.data_ptr(), scaling.nbytes(), 0));
    }
  }
  return communicator.Synchronize();
}

absl::Status TrainingModel::ExportWeights(const std::string& path, uint32_t file_mode) {
  ASSIGN_OR_RETURN(std::string weights, PickleStateDict(*model_));
  absl::Status written = WriteFileAtomically(path, weights, file_mode);
  if (written.ok()) return written;
  return WithExitCode(absl::Status(written.code(), absl::StrCat("--export: ", written.message())),
                      kExitCheckpointIo);
}

absl::Status TrainingModel::WriteParameters(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  for (const at::Tensor& p : model_->parameters()) {
    at::Tensor host = p.detach().to(at::kCPU).contiguous();
    out.write(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace stoker::trainer
