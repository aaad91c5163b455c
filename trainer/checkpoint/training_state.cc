#include "trainer/checkpoint/training_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/nn/fp8_state.h"
#include "trainer/nn/state_dict.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "common/cuda_stream.h"
#endif

namespace stoker::trainer {
namespace {

constexpr char kFormat[] = "stoker training checkpoint";
// Entries of the FP8 scaling state: "fp8/<layer>/scaling".
constexpr char kFp8Prefix[] = "fp8/";

// The checkpoint's name of each element type it stores.
constexpr std::pair<at::ScalarType, const char*> kDtypeNames[] = {
    {at::kFloat, "float32"},     {at::kDouble, "float64"}, {at::kHalf, "float16"},
    {at::kBFloat16, "bfloat16"}, {at::kLong, "int64"},     {at::kInt, "int32"},
    {at::kByte, "uint8"},        {at::kBool, "bool"}};

absl::StatusOr<std::string> DtypeName(at::ScalarType type) {
  for (const auto& [known, name] : kDtypeNames) {
    if (known == type) return std::string(name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint: unsupported dtype ", c10::toString(type)));
}

// Every tensor a checkpoint holds, with its entry name, in the checkpoint's order, and
// whether only the optimizer step changes it (the optimizer's parameters and state).
struct NamedTensor {
  std::string name;
  at::Tensor tensor;
  bool optimizer_only = false;
};

// Every optimizer state tensor of `state` with its name in the checkpoint,
// "optimizer/<parameter>/<what>", in the optimizer's order. Internal, prefixed with `doing`,
// when the optimizer and the parameter names disagree.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> NamedOptimizerTensors(
    const TrainingStateRefs& state, absl::string_view doing) {
  const auto optimizer_state = state.optimizer->StateTensors();
  if (optimizer_state.size() != state.parameter_names.size()) {
    return absl::InternalError(
        absl::StrCat(doing, ": the optimizer and the parameter names disagree"));
  }
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (size_t i = 0; i < optimizer_state.size(); ++i) {
    for (const auto& [what, tensor] : optimizer_state[i]) {
      named.emplace_back(absl::StrCat("optimizer/", state.parameter_names[i], "/", what), tensor);
    }
  }
  return named;
}

// The checkpoint's name of an FP8 layer's scaling state (Note [FP8 scaling state in
// checkpoints], trainer/nn/fp8_state.h).
std::string Fp8EntryName(const Fp8LinearState& state) {
  return absl::StrCat(kFp8Prefix, state.name(), "/scaling");
}

absl::StatusOr<std::vector<NamedTensor>> StateTensors(const TrainingStateRefs& state) {
  std::vector<NamedTensor> named;
  std::set<std::string> parameters(state.parameter_names.begin(), state.parameter_names.end());
  for (const auto& [name, tensor] : StateDictItems(*state.model)) {
    named.push_back({absl::StrCat("model/", name), tensor, parameters.count(name) > 0});
  }
  ASSIGN_OR_RETURN(const auto optimizer_tensors, NamedOptimizerTensors(state, "checkpoint"));
  for (const auto& [name, tensor] : optimizer_tensors) named.push_back({name, tensor, true});
  // Forward and backward change the FP8 scaling state: staged like the buffers. A state not
  // made yet (a model never placed on a device nor run) holds its initial values, which a
  // resume starts from anyway.
  for (const auto& fp8 : state.model->Fp8States()) {
    if (fp8->scaling().defined()) named.push_back({Fp8EntryName(*fp8), fp8->scaling(), false});
  }
  return named;
}

}  // namespace

// One tensor's place in the buffers (Note [Snapshot buffers]).
struct SnapshotBuffers::Impl {
  struct Slot {
    std::vector<int64_t> sizes;
    at::ScalarType dtype = at::kFloat;
    size_t bytes = 0;
    size_t offset = 0;   // in `host`
    at::Tensor staging;  // defined: copied on the device first, on the compute stream
  };

  ~Impl();

  // Whether `tensor` can be copied through `slot`: the shape, type and device it was made
  // for, and contiguous unless staged.
  bool Fits(const Slot& slot, const at::Tensor& tensor) const {
    return tensor.device() == device && tensor.scalar_type() == slot.dtype &&
           tensor.sizes().vec() == slot.sizes && (slot.staging.defined() || tensor.is_contiguous());
  }

  c10::Device device{at::kCPU};
  std::map<std::string, Slot> slots;  // by checkpoint entry name
  char* host = nullptr;               // pinned, `host_bytes`
  size_t host_bytes = 0;
  int64_t staging_bytes = 0;
  bool gate_pending = false;  // the last copies' event is still to be waited for
#ifdef STOKER_WITH_CUDA
  CudaStream copy_stream;
  CudaEvent staged;  // recorded on the compute stream after the staging copies
  CudaEvent copied;  // recorded on the copy stream after the copies
#endif
};

// Friend of SnapshotBuffers: its Impl for the snapshot.
class SnapshotAccess {
 public:
  static SnapshotBuffers::Impl& Of(SnapshotBuffers& buffers) { return *buffers.impl_; }
};

namespace {

#ifdef STOKER_WITH_CUDA
// The host callback on the copy stream after a snapshot's copies: marks them done. It runs
// on a CUDA thread and must not call CUDA. Owns `done` (a heap std::shared_ptr).
void CUDART_CB MarkCopied(void* done) {
  auto* notification = static_cast<std::shared_ptr<absl::Notification>*>(done);
  (*notification)->Notify();
  delete notification;
}
#endif

// Waits, on the writer thread, for a snapshot's copies (Note [Snapshot buffers]). A device
// that stopped (a fault ends the run on the training thread) would never mark them: the
// wait is bounded, by far more than any copy of `bytes` takes.
absl::Status WaitForCopies(const absl::Notification& done, size_t bytes) {
  const absl::Duration limit = absl::Seconds(120) + absl::Seconds(static_cast<double>(bytes) / 1e9);
  if (done.WaitForNotificationWithTimeout(limit)) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("checkpoint: the copy of the training state (", bytes / 1000000,
                   " MB) to host memory did not end within ", absl::FormatDuration(limit),
                   "; the device is not making progress"));
}

// Note [Snapshot of the training state]
// A checkpoint's tensors are held by reference in its CheckpointWriter rather than copied
// into one buffer: serialising them (and their checksum) can then run on the writer thread
// (--checkpoint_async) while the step waits only for their copy to host memory. A device
// tensor is copied into pinned host memory (PyTorch's caching host allocator, so that the
// next checkpoint reuses the blocks) without blocking, and the step waits once, on the
// current stream, after the last copy. A host tensor is copied too when the snapshot must
// outlive the step (the optimizer updates it in place); when the file is sealed before the
// state changes again, it is referenced as it is.
class StateWriter {
 public:
  StateWriter(bool own_copies, std::shared_ptr<SnapshotBuffers> buffers)
      : own_copies_(own_copies), buffers_(std::move(buffers)) {}

  void AddInt(absl::string_view name, int64_t value) { checkpoint_.AddInt(name, value); }
  void AddDouble(absl::string_view name, double value) { checkpoint_.AddDouble(name, value); }
  void AddString(absl::string_view name, absl::string_view value) {
    checkpoint_.AddString(name, value);
  }
  void AddTensor(const std::string& name, const at::Tensor& tensor, const std::string& dtype) {
    if (tensor.is_cuda() && buffers_ != nullptr) {
      SnapshotBuffers::Impl& impl = SnapshotAccess::Of(*buffers_);
      auto slot = impl.slots.find(name);
      if (slot != impl.slots.end() && impl.Fits(slot->second, tensor)) {
        // Note [Snapshot buffers]: copied in Done().
        pending_.emplace_back(&slot->second, tensor.detach());
        checkpoint_.AddHeldTensor(name, dtype, slot->second.sizes, buffers_,
                                  impl.host + slot->second.offset, slot->second.bytes);
        return;
      }
      LogWarning(
          "checkpoint: %s is not the tensor the snapshot buffers were made for; copied "
          "with a host sync",
          name);
    }
    at::Tensor host;
    if (tensor.is_cuda()) {
      host = at::empty(tensor.sizes(),
                       at::TensorOptions().dtype(tensor.scalar_type()).pinned_memory(true));
      host.copy_(tensor.detach(), /*non_blocking=*/true);
      device_ = tensor.device();
    } else if (!tensor.is_cpu()) {
      host = tensor.detach().to(at::kCPU).contiguous();
    } else if (own_copies_) {
      host = tensor.detach().clone(at::MemoryFormat::Contiguous);
    } else {
      host = tensor.detach().contiguous();
    }
    auto held = std::make_shared<at::Tensor>(host);
    checkpoint_.AddHeldTensor(name, dtype, host.sizes().vec(), held, host.data_ptr(),
                              host.nbytes());
  }

  // The checkpoint, once the copies into memory of the caching host allocator have ended;
  // those into the buffers are enqueued (Note [Snapshot buffers]).
  absl::StatusOr<CheckpointWriter> Done() && {
    if (!pending_.empty()) RETURN_IF_ERROR(CopyIntoBuffers());
    if (device_.has_value()) {
      c10::impl::getDeviceGuardImpl(device_->type())->getStream(*device_).synchronize();
    }
    return std::move(checkpoint_);
  }

 private:
  // Note [Snapshot buffers]. Call on the training thread.
  absl::Status CopyIntoBuffers() {
#ifdef STOKER_WITH_CUDA
    SnapshotBuffers::Impl& impl = SnapshotAccess::Of(*buffers_);
    c10::cuda::CUDAGuard guard(impl.device);
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(impl.device.index()).stream();
    const cudaStream_t copy = impl.copy_stream.get();
    // The staging tensors and the host memory are free once the last copies have ended.
    if (impl.gate_pending) RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(compute, impl.copied.get(), 0));
    {
      c10::NoGradGuard no_grad;
      for (auto& [slot, tensor] : pending_) {
        if (slot->staging.defined()) slot->staging.copy_(tensor, /*non_blocking=*/true);
      }
    }
    RETURN_IF_ERROR(impl.staged.Record(compute));
    RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(copy, impl.staged.get(), 0));
    size_t bytes = 0;
    for (const auto& [slot, tensor] : pending_) {
      const void* source = slot->staging.defined() ? slot->staging.data_ptr() : tensor.data_ptr();
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(impl.host + slot->offset, source, slot->bytes,
                                           cudaMemcpyDeviceToHost, copy));
      bytes += slot->bytes;
    }
    RETURN_IF_ERROR(impl.copied.Record(copy));
    impl.gate_pending = true;
    auto done = std::make_shared<absl::Notification>();
    auto* owned = new std::shared_ptr<absl::Notification>(done);
    if (absl::Status launched =
            CudaStatus(cudaLaunchHostFunc(copy, MarkCopied, owned), "cudaLaunchHostFunc");
        !launched.ok()) {
      delete owned;
      return launched;
    }
    checkpoint_.SetHeldBytesReady([done, bytes] { return WaitForCopies(*done, bytes); });
    pending_.clear();
    return absl::OkStatus();
#else
    return absl::InternalError("checkpoint: snapshot buffers without CUDA");
#endif
  }

  bool own_copies_;
  std::shared_ptr<SnapshotBuffers> buffers_;  // null: none
  CheckpointWriter checkpoint_;
  absl::optional<c10::Device> device_;  // of the copies to wait for
  // Device tensors to copy into the buffers, with their slots.
  std::vector<std::pair<SnapshotBuffers::Impl::Slot*, at::Tensor>> pending_;
};

void AddTensor(StateWriter& writer, const std::string& name, const at::Tensor& tensor,
               const std::string& dtype) {
  writer.AddTensor(name, tensor, dtype);
}

absl::Status AddTensorChecked(StateWriter& writer, const std::string& name,
                              const at::Tensor& tensor) {
  ASSIGN_OR_RETURN(std::string dtype, DtypeName(tensor.scalar_type()));
  AddTensor(writer, name, tensor, dtype);
  return absl::OkStatus();
}

// Copies the stored tensor `name` into `target` (any device, any memory format).
absl::Status CopyInto(const CheckpointReader& checkpoint, const std::string& name,
                      at::Tensor target) {
  ASSIGN_OR_RETURN(CheckpointTensor stored, checkpoint.Tensor(name));
  ASSIGN_OR_RETURN(std::string dtype, DtypeName(target.scalar_type()));
  if (stored.dtype != dtype || stored.shape != target.sizes().vec()) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.source(), ": ", name, " is ", stored.dtype, " [",
                     absl::StrJoin(stored.shape, ", "), "] in the checkpoint but ", dtype, " [",
                     absl::StrJoin(target.sizes(), ", "), "] in this run"));
  }
  if (static_cast<size_t>(target.nbytes()) != stored.data.size()) {
    return absl::DataLossError(
        absl::StrCat(checkpoint.source(), ": ", name, " has the wrong size"));
  }
  // Entries sit at any byte offset of the file: copy the bytes into an aligned tensor
  // rather than view them as float (a misaligned float view is undefined behaviour).
  at::Tensor host = at::empty(target.sizes(), at::TensorOptions().dtype(target.scalar_type()));
  std::memcpy(host.data_ptr(), stored.data.data(), stored.data.size());
  c10::NoGradGuard no_grad;
  target.copy_(host);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointWriter> SnapshotCheckpoint(
    const TrainingStateRefs& state, const RunPosition& position, const RunGeometry& geometry,
    bool own_copies, const std::shared_ptr<SnapshotBuffers>& buffers) {
  // Note [Snapshot of the training state].
  return TorchCall("writing the checkpoint", [&]() -> absl::StatusOr<CheckpointWriter> {
    StateWriter writer(own_copies, buffers);
    writer.AddString("format", kFormat);
    writer.AddString("geometry/model", geometry.model);
    writer.AddInt("geometry/num_classes", geometry.num_classes);
    writer.AddInt("geometry/image_size", geometry.image_size);
    writer.AddInt("geometry/world_size", geometry.world_size);
    writer.AddInt("geometry/batch_size", geometry.batch_size);
    writer.AddInt("geometry/accumulate", geometry.accumulate);
    writer.AddString("geometry/optimizer", geometry.optimizer);
    writer.AddInt("geometry/seed", static_cast<int64_t>(geometry.seed));
    writer.AddInt("geometry/dataset_size", geometry.dataset_size);
    writer.AddInt("position/epoch", position.epoch);
    writer.AddInt("position/batches_done", position.batches_done);
    writer.AddInt("position/global_step", position.global_step);
    writer.AddInt("position/samples_done", position.samples_done);
    writer.AddInt("position/global_batch", position.global_batch);

    ASSIGN_OR_RETURN(const std::vector<NamedTensor> named, StateTensors(state));
    for (const NamedTensor& t : named) RETURN_IF_ERROR(AddTensorChecked(writer, t.name, t.tensor));
    writer.AddInt("optimizer/steps_taken", state.optimizer->steps_taken());
    const LossScaler::State scaler = state.scaler->state();
    writer.AddDouble("scaler/scale", scaler.scale);
    writer.AddInt("scaler/growth_tracker", scaler.growth_tracker);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      AddTensor(writer, "rng/cpu", generator.get_state(), "uint8");
    }
    return std::move(writer).Done();
  });
}

SnapshotBuffers::Impl::~Impl() {
#ifdef STOKER_WITH_CUDA
  // The copies read from the staging tensors and write the host memory.
  if (copy_stream.get() != nullptr) (void)copy_stream.Synchronize();
  if (host != nullptr) (void)cudaFreeHost(host);
#endif
}

SnapshotBuffers::SnapshotBuffers(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SnapshotBuffers::~SnapshotBuffers() = default;

int64_t SnapshotBuffers::host_bytes() const { return static_cast<int64_t>(impl_->host_bytes); }
int64_t SnapshotBuffers::staging_bytes() const { return impl_->staging_bytes; }

absl::StatusOr<std::shared_ptr<SnapshotBuffers>> SnapshotBuffers::Create(
    const TrainingStateRefs& state) {
#ifdef STOKER_WITH_CUDA
  ASSIGN_OR_RETURN(std::vector<NamedTensor> named, TorchCall("checkpoint: the snapshot buffers",
                                                             [&] { return StateTensors(state); }));
  auto impl = std::make_unique<Impl>();
  // Note [Snapshot buffers]: one pinned block; each tensor at an offset aligned for any copy.
  constexpr size_t kAlignment = 256;
  size_t staged_count = 0;
  RETURN_IF_ERROR(TorchCall("checkpoint: the snapshot buffers", [&]() -> absl::Status {
    for (const NamedTensor& t : named) {
      if (!t.tensor.is_cuda()) continue;
      if (impl->slots.empty()) impl->device = t.tensor.device();
      if (t.tensor.device() != impl->device) continue;  // copied with a sync (one device a rank)
      Impl::Slot slot;
      slot.sizes = t.tensor.sizes().vec();
      slot.dtype = t.tensor.scalar_type();
      slot.bytes = static_cast<size_t>(t.tensor.nbytes());
      slot.offset = impl->host_bytes;
      impl->host_bytes += (slot.bytes + kAlignment - 1) / kAlignment * kAlignment;
      if (!t.optimizer_only || !t.tensor.is_contiguous()) {
        slot.staging = at::empty(t.tensor.sizes(), t.tensor.options().requires_grad(false),
                                 at::MemoryFormat::Contiguous);
        impl->staging_bytes += static_cast<int64_t>(slot.bytes);
        ++staged_count;
      }
      impl->slots.emplace(t.name, std::move(slot));
    }
    return absl::OkStatus();
  }));
  if (impl->slots.empty()) return std::shared_ptr<SnapshotBuffers>();
  c10::cuda::CUDAGuard guard(impl->device);
  const absl::Time start = absl::Now();
  void* host = nullptr;
  if (cudaError_t error =
          cudaHostAlloc(&host, std::max<size_t>(impl->host_bytes, 1), cudaHostAllocPortable);
      error != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint: cannot pin ", impl->host_bytes / 1000000,
                     " MB of host memory for the snapshots of the training state (cudaHostAlloc: ",
                     cudaGetErrorString(error), ")"));
  }
  impl->host = static_cast<char*>(host);
  const absl::Duration pinning = absl::Now() - start;
  ASSIGN_OR_RETURN(impl->copy_stream, CudaStream::Create(impl->device.index()));
  ASSIGN_OR_RETURN(impl->staged, CudaEvent::Create());
  ASSIGN_OR_RETURN(impl->copied, CudaEvent::Create());
  LogInfo(
      "checkpoint snapshots: %.1f MB of pinned host memory (pinned in %.2f s); %zu of %zu "
      "tensors (%.1f MB) staged on the device",
      impl->host_bytes / 1e6, absl::ToDoubleSeconds(pinning), staged_count, impl->slots.size(),
      impl->staging_bytes / 1e6);
  return std::shared_ptr<SnapshotBuffers>(new SnapshotBuffers(std::move(impl)));
#else
  (void)state;
  return std::shared_ptr<SnapshotBuffers>();
#endif
}

absl::Status SnapshotBuffers::GateUpdates() {
  if (!impl_->gate_pending) return absl::OkStatus();
#ifdef STOKER_WITH_CUDA
  const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(impl_->device.index()).stream();
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(compute, impl_->copied.get(), 0));
#endif
  impl_->gate_pending = false;
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeCheckpoint(const TrainingStateRefs& state,
                                             const RunPosition& position,
                                             const RunGeometry& geometry) {
  ASSIGN_OR_RETURN(CheckpointWriter checkpoint,
                   SnapshotCheckpoint(state, position, geometry, /*own_copies=*/false));
  return std::move(checkpoint).Finish();
}

absl::StatusOr<RunGeometry> CheckpointGeometry(const CheckpointReader& c) {
  ASSIGN_OR_RETURN(std::string format, c.String("format"));
  if (format != kFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.source(), ": not a training checkpoint (", format, ")"));
  }
  RunGeometry g;
  ASSIGN_OR_RETURN(g.model, c.String("geometry/model"));
  ASSIGN_OR_RETURN(g.num_classes, c.Int("geometry/num_classes"));
  ASSIGN_OR_RETURN(g.image_size, c.Int("geometry/image_size"));
  ASSIGN_OR_RETURN(g.world_size, c.Int("geometry/world_size"));
  ASSIGN_OR_RETURN(g.batch_size, c.Int("geometry/batch_size"));
  ASSIGN_OR_RETURN(g.accumulate, c.Int("geometry/accumulate"));
  ASSIGN_OR_RETURN(g.optimizer, c.String("geometry/optimizer"));
  ASSIGN_OR_RETURN(int64_t seed, c.Int("geometry/seed"));
  g.seed = static_cast<uint64_t>(seed);
  if (c.Has("geometry/dataset_size")) {
    ASSIGN_OR_RETURN(g.dataset_size, c.Int("geometry/dataset_size"));
  }
  return g;
}

absl::StatusOr<RunPosition> CheckpointPosition(const CheckpointReader& c) {
  RunPosition p;
  ASSIGN_OR_RETURN(p.epoch, c.Int("position/epoch"));
  ASSIGN_OR_RETURN(p.batches_done, c.Int("position/batches_done"));
  ASSIGN_OR_RETURN(p.global_step, c.Int("position/global_step"));
  if (c.Has("position/samples_done")) {
    ASSIGN_OR_RETURN(p.samples_done, c.Int("position/samples_done"));
    ASSIGN_OR_RETURN(p.global_batch, c.Int("position/global_batch"));
  } else {
    // Written before positions were counted in samples: its run took every batch of the
    // epoch from the first, world_size x batch_size samples of the global order each.
    ASSIGN_OR_RETURN(const RunGeometry g, CheckpointGeometry(c));
    p.samples_done = p.batches_done * g.world_size * g.batch_size;
    p.global_batch = g.world_size * g.batch_size * g.accumulate;
  }
  if (p.epoch < 0 || p.batches_done < 0 || p.global_step < 0 || p.samples_done < 0 ||
      p.global_batch < 0) {
    return absl::DataLossError(absl::StrCat(c.source(), ": negative position"));
  }
  return p;
}

absl::Status CheckResumable(const RunGeometry& saved, const RunPosition& position,
                            const RunGeometry& current, const std::string& source) {
  auto differs = [&](absl::string_view what, const auto& then, const auto& now) {
    return absl::InvalidArgumentError(absl::StrCat(source, " was written with ", what, " ", then,
                                                   "; this run has ", now,
                                                   ": cannot resume from it"));
  };
  if (saved.model != current.model) return differs("--model", saved.model, current.model);
  if (saved.num_classes != current.num_classes) {
    return differs("--num_classes", saved.num_classes, current.num_classes);
  }
  if (saved.optimizer != current.optimizer)
    return differs("--optimizer", saved.optimizer, current.optimizer);
  if (position.samples_done > 0 && saved.seed != current.seed) {
    // Mid-epoch, the rest of the epoch is the rest of the order the seed made.
    return absl::InvalidArgumentError(
        absl::StrCat(source, " stopped in the middle of epoch ", position.epoch + 1,
                     " of the order of --seed=", saved.seed, "; this run has --seed=", current.seed,
                     ": cannot resume from it (resume with --seed=", saved.seed, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckResumableDataset(const RunGeometry& saved, const RunPosition& position,
                                   int64_t dataset_size, const std::string& source) {
  if (position.samples_done == 0 || saved.dataset_size == 0 || saved.dataset_size == dataset_size) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, " stopped in the middle of epoch ", position.epoch + 1, " of a training set of ",
      saved.dataset_size, " samples; the data service serves ", dataset_size,
      " (launcher --train_dir, --dataset, --synthetic_samples): cannot resume from it"));
}

absl::Status RestoreModelState(const CheckpointReader& checkpoint, ImageClassifier& model) {
  return TorchCall(absl::StrCat(checkpoint.source(), ": restoring the model"),
                   [&]() -> absl::Status {
                     for (const auto& [name, tensor] : StateDictItems(model)) {
                       RETURN_IF_ERROR(CopyInto(checkpoint, absl::StrCat("model/", name), tensor));
                     }
                     return absl::OkStatus();
                   });
}

absl::StatusOr<std::string> RestoreFp8State(const CheckpointReader& checkpoint,
                                            ImageClassifier& model) {
  return TorchCall(
      absl::StrCat(checkpoint.source(), ": restoring the FP8 scaling state"),
      [&]() -> absl::StatusOr<std::string> {
        const std::vector<c10::intrusive_ptr<Fp8LinearState>> states = model.Fp8States();
        std::set<std::string> saved;
        for (const std::string& name : checkpoint.Names()) {
          if (absl::StartsWith(name, kFp8Prefix)) saved.insert(name);
        }
        if (states.empty()) {
          if (saved.empty()) return std::string();
          return absl::StrCat(checkpoint.source(), " holds the FP8 scaling state of ", saved.size(),
                              " layers; this run is not --precision=fp8: ignored");
        }
        if (saved.empty()) {
          return absl::StrCat(checkpoint.source(),
                              " holds no FP8 scaling state (its run was not --precision=fp8): FP8 "
                              "scaling starts afresh, from the first step's amaxes");
        }
        // A state not made yet is made on the device of the model's parameters.
        const std::vector<at::Tensor> parameters = model.parameters();
        const c10::Device device =
            parameters.empty() ? c10::Device(at::kCPU) : parameters[0].device();
        std::vector<std::string> fresh;
        int restored = 0;
        for (const auto& fp8 : states) {
          const std::string name = Fp8EntryName(*fp8);
          if (saved.erase(name) == 0) {
            fresh.push_back(fp8->name());
            continue;
          }
          ASSIGN_OR_RETURN(CheckpointTensor stored, checkpoint.Tensor(name));
          const std::vector<int64_t> sizes = Fp8LinearState::ScalingSizes(fp8->recipe());
          if (stored.dtype != "float32" || stored.shape.size() != 2 ||
              stored.shape[0] != sizes[0]) {
            return absl::InvalidArgumentError(absl::StrCat(
                checkpoint.source(), ": ", name, " is ", stored.dtype, " [",
                absl::StrJoin(stored.shape, ", "), "], not an FP8 scaling state (float32 [",
                absl::StrJoin(sizes, ", "), "])"));
          }
          if (stored.shape != sizes) {
            const int64_t history = stored.shape[1] - (sizes[1] - fp8->recipe().history);
            return absl::InvalidArgumentError(absl::StrCat(
                checkpoint.source(), ": ", name, " is [", absl::StrJoin(stored.shape, ", "),
                "] in the checkpoint, an FP8 amax history of ", history,
                " values; this run has --fp8_amax_history=", fp8->recipe().history, " ([",
                absl::StrJoin(sizes, ", "), "]): resume with --fp8_amax_history=", history));
          }
          if (!fp8->scaling().defined()) fp8->PlaceOn(device);
          RETURN_IF_ERROR(CopyInto(checkpoint, name, fp8->scaling()));
          fp8->MarkPrimed();
          ++restored;
        }
        std::string note = absl::StrCat("restored the FP8 scaling state of ", restored, " of ",
                                        states.size(), " layers from ", checkpoint.source());
        if (!fresh.empty()) {
          absl::StrAppend(&note, "; not in it, starting afresh: ", absl::StrJoin(fresh, ", "));
        }
        if (!saved.empty()) {
          absl::StrAppend(
              &note, "; of layers this run does not have, ignored: ", absl::StrJoin(saved, ", "));
        }
        return note;
      });
}

absl::Status RestoreTrainingState(const CheckpointReader& checkpoint,
                                  const TrainingStateRefs& state, std::string* fp8_note) {
  RETURN_IF_ERROR(RestoreModelState(checkpoint, *state.model));
  ASSIGN_OR_RETURN(std::string note, RestoreFp8State(checkpoint, *state.model));
  if (fp8_note != nullptr) {
    *fp8_note = std::move(note);
  } else if (!note.empty()) {
    LogInfo("%s", note);
  }
  return TorchCall(absl::StrCat(checkpoint.source(), ": restoring"), [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const auto optimizer_tensors, NamedOptimizerTensors(state, "resume"));
    for (const auto& [name, tensor] : optimizer_tensors) {
      RETURN_IF_ERROR(CopyInto(checkpoint, name, tensor));
    }
    ASSIGN_OR_RETURN(int64_t steps_taken, checkpoint.Int("optimizer/steps_taken"));
    state.optimizer->set_steps_taken(steps_taken);
    LossScaler::State scaler;
    ASSIGN_OR_RETURN(scaler.scale, checkpoint.Double("scaler/scale"));
    ASSIGN_OR_RETURN(scaler.growth_tracker, checkpoint.Int("scaler/growth_tracker"));
    // A checkpoint of a run without loss scaling holds {1, 0}: keep this run's initial scale.
    if (state.scaler->enabled() && !(scaler.scale == 1.0 && scaler.growth_tracker == 0)) {
      RETURN_IF_ERROR(state.scaler->Restore(scaler));
    }
    ASSIGN_OR_RETURN(CheckpointTensor rng, checkpoint.Tensor("rng/cpu"));
    at::Tensor rng_state = at::empty({static_cast<int64_t>(rng.data.size())}, at::kByte);
    std::memcpy(rng_state.data_ptr(), rng.data.data(), rng.data.size());
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng_state);
    }
    return absl::OkStatus();
  });
}

}  // namespace stoker::trainer
