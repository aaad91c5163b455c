#include "trainer/graph/pointwise_kernel.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "trainer/graph/pointwise_codegen.h"
#include "trainer/graph/pointwise_region.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>
#endif

namespace stoker::trainer {
namespace {

std::atomic<int64_t> launches{0};

// Logs why a region runs as its composition, once per distinct reason for the process (a
// missing NVRTC would otherwise give one line per region). Thread-safe.
void LogFallbackOnce(const PointwiseRegion& region, const std::string& why) {
  static std::mutex mu;
  static auto* logged = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (!logged->insert(why).second) return;
  LogWarning(
      "%s runs as its ATen calls, as does any other pointwise region for the same reason: %s",
      region.where, why);
}

#ifdef STOKER_WITH_CUDA

// Note [Pointwise kernel layout] (pointwise_codegen.h): the walk of one launch.
struct Walk {
  std::vector<int64_t> sizes;                 // merged, outermost first
  std::vector<std::vector<int64_t>> strides;  // per operand, over `sizes`
  std::vector<bool> linear;
  int64_t numel = 0;
};

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k)
    strides[k] = strides[k + 1] * sizes[k + 1];
  return strides;
}

// The walk over `shape` in the memory order of outputs with `out_strides`, reading
// `operands` (each broadcastable to `shape`).
Walk PlanWalk(at::IntArrayRef shape, at::IntArrayRef out_strides,
              const std::vector<at::Tensor>& operands) {
  const int dims = static_cast<int>(shape.size());
  std::vector<int> order;
  for (int d = 0; d < dims; ++d) {
    if (shape[d] != 1) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return out_strides[a] > out_strides[b]; });
  // Per operand (the outputs last), its strides over `order`.
  std::vector<std::vector<int64_t>> strides(operands.size() + 1);
  for (size_t j = 0; j < operands.size(); ++j) {
    const at::Tensor& t = operands[j];
    const int lead = dims - static_cast<int>(t.dim());
    for (int d : order) {
      const int td = d - lead;
      strides[j].push_back(td < 0 || t.size(td) == 1 ? 0 : t.stride(td));
    }
  }
  for (int d : order) strides.back().push_back(out_strides[d]);
  Walk walk;
  std::vector<std::vector<int64_t>> merged(strides.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t size = shape[order[k]];
    bool merge = !walk.sizes.empty();
    for (size_t j = 0; merge && j < strides.size(); ++j)
      merge = merged[j].back() == strides[j][k] * size;
    if (merge) {
      walk.sizes.back() *= size;
      for (size_t j = 0; j < strides.size(); ++j) merged[j].back() = strides[j][k];
    } else {
      walk.sizes.push_back(size);
      for (size_t j = 0; j < strides.size(); ++j) merged[j].push_back(strides[j][k]);
    }
  }
  if (walk.sizes.empty()) {
    walk.sizes = {1};
    for (auto& m : merged) m = {0};
  }
  merged.pop_back();
  walk.numel = 1;
  for (int64_t s : walk.sizes) walk.numel *= s;
  const std::vector<int64_t> contiguous = ContiguousStrides(walk.sizes);
  for (auto& m : merged) {
    bool linear = true;
    for (size_t k = 0; k < m.size(); ++k)
      linear = linear && (walk.sizes[k] == 1 || m[k] == contiguous[k]);
    walk.linear.push_back(linear);
  }
  walk.strides = std::move(merged);
  return walk;
}

// The CUDA driver's entry points, from libcuda.so.1 loaded at run time (the build links only
// the CUDA runtime).
struct Driver {
  decltype(&cuModuleLoadData) load = nullptr;
  decltype(&cuModuleGetFunction) function = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuGetErrorString) error = nullptr;
  decltype(&cuCtxGetDevice) context_device = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  std::string load_error;
};

const Driver& LoadDriver() {
  static const Driver* const kDriver = [] {
    auto* driver = new Driver();
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      driver->load_error = absl::StrCat("libcuda.so.1 does not load: ", dlerror());
      return driver;
    }
    auto find = [&](auto* fn, const char* symbol) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(library, symbol));
      if (*fn == nullptr && driver->load_error.empty())
        driver->load_error = absl::StrCat("libcuda.so.1 lacks ", symbol);
    };
    find(&driver->load, "cuModuleLoadData");
    find(&driver->function, "cuModuleGetFunction");
    find(&driver->launch, "cuLaunchKernel");
    find(&driver->error, "cuGetErrorString");
    find(&driver->context_device, "cuCtxGetDevice");
    find(&driver->attribute, "cuDeviceGetAttribute");
    return driver;
  }();
  return *kDriver;
}

std::string DriverError(const Driver& driver, CUresult r) {
  const char* text = nullptr;
  driver.error(r, &text);
  return text != nullptr ? text : absl::StrCat("CUresult ", static_cast<int>(r));
}

struct DeviceKernel {
  CUfunction function = nullptr;
  int multiprocessors = 0;
};

// `source` compiled for the current context's device, and its kernel `name`.
absl::StatusOr<DeviceKernel> CompileKernel(const std::string& source, const char* name) {
  const Driver& driver = LoadDriver();
  if (!driver.load_error.empty()) return absl::UnavailableError(driver.load_error);
  CUdevice cu_device = 0;
  CUresult r = driver.context_device(&cu_device);
  if (r != CUDA_SUCCESS)
    return absl::InternalError(absl::StrCat("cuCtxGetDevice: ", DriverError(driver, r)));
  int major = 0, minor = 0;
  DeviceKernel kernel;
  driver.attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu_device);
  driver.attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu_device);
  driver.attribute(&kernel.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu_device);
  absl::StatusOr<std::string> image = CompilePointwiseSource(source, major, minor, /*cubin=*/true);
  if (!image.ok()) return image.status();
  CUmodule module = nullptr;
  r = driver.load(&module, image->data());
  if (r != CUDA_SUCCESS)
    return absl::InternalError(absl::StrCat("cuModuleLoadData: ", DriverError(driver, r)));
  r = driver.function(&kernel.function, module, name);
  if (r != CUDA_SUCCESS)
    return absl::InternalError(absl::StrCat("cuModuleGetFunction: ", DriverError(driver, r)));
  return kernel;
}

// Compiled kernels by (device, source), for the process; modules are never unloaded. A failure
// (no driver, NVRTC, the module or its function) is kept too, so it is not retried each step.
// Thread-safe.
absl::StatusOr<DeviceKernel> KernelFor(int device, const std::string& source, const char* name) {
  static std::mutex mu;
  static auto* kernels = new std::map<std::pair<int, std::string>, absl::StatusOr<DeviceKernel>>();
  std::lock_guard<std::mutex> lock(mu);
  auto found = kernels->find({device, source});
  if (found == kernels->end())
    found = kernels->emplace(std::make_pair(device, source), CompileKernel(source, name)).first;
  return found->second;
}

// Launches `kernel` over `walk` on the current stream of `device`, with `pointers` first in
// its parameter struct and the strides of the walk's operands after the sizes.
void Launch(const DeviceKernel& kernel, const Walk& walk, const std::vector<const void*>& pointers,
            c10::DeviceIndex device) {
  std::vector<uint64_t> params;
  for (const void* p : pointers) params.push_back(reinterpret_cast<uint64_t>(p));
  params.push_back(static_cast<uint64_t>(walk.numel));
  for (int64_t s : walk.sizes) params.push_back(static_cast<uint64_t>(s));
  for (const auto& strides : walk.strides) {
    for (int64_t s : strides) params.push_back(static_cast<uint64_t>(s));
  }
  constexpr int64_t kThreads = 256;
  const int64_t wanted = (walk.numel + kThreads - 1) / kThreads;
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(wanted, static_cast<int64_t>(kernel.multiprocessors) * 16));
  // The struct is passed by value: cuLaunchKernel copies the bytes the kernel's one
  // parameter has, from params.data().
  void* args[] = {params.data()};
  const CUstream stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const Driver& driver = LoadDriver();
  const CUresult r = driver.launch(kernel.function, static_cast<unsigned>(blocks), 1, 1, kThreads,
                                   1, 1, 0, stream, args, nullptr);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuLaunchKernel: ", DriverError(driver, r));
  launches.fetch_add(1);
}

// What one run of a region needs that its inputs decide.
struct Launchable {
  PointwiseSignature signature;
  std::vector<int64_t> shape;
  std::vector<int64_t> out_strides;
  std::vector<c10::ScalarType> dtypes;
  Walk walk;
  std::string source;
};

// The forward launch of `region` on `inputs`, or why the kernels do not apply.
absl::StatusOr<Launchable> PlanForward(const PointwiseRegion& region,
                                       const std::vector<at::Tensor>& inputs) {
  Launchable l;
  if (inputs.empty()) return absl::FailedPreconditionError("no tensor inputs");
  const c10::Device device = inputs[0].device();
  std::vector<std::vector<int64_t>> shapes(region.nodes.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    const at::Tensor& t = inputs[j];
    if (!t.is_cuda() || t.device() != device || t.layout() != at::kStrided)
      return absl::FailedPreconditionError("an input is not a strided tensor on the same GPU");
    l.signature.input_dtypes.push_back(t.scalar_type());
    l.signature.input_zero_dim.push_back(t.dim() == 0);
  }
  l.signature.autocast = at::autocast::is_autocast_enabled(at::kCUDA);
  auto dtypes = PointwiseNodeDtypes(region, l.signature.input_dtypes, l.signature.input_zero_dim,
                                    l.signature.autocast);
  if (!dtypes.ok()) return dtypes.status();
  l.dtypes = std::move(*dtypes);
  for (size_t n = 0; n < region.nodes.size(); ++n) {
    const PointwiseNode& node = region.nodes[n];
    if (node.op == PointwiseOp::kInput) {
      shapes[n] = inputs[node.input].sizes().vec();
    } else {
      shapes[n] = shapes[node.operands[0]];
      if (node.operands.size() == 2)
        shapes[n] = at::infer_size(shapes[n], shapes[node.operands[1]]);
    }
    if (l.shape.size() < shapes[n].size() ||
        c10::multiply_integers(shapes[n]) > c10::multiply_integers(l.shape))
      l.shape = shapes[n];
  }
  for (int n : region.output_nodes) {
    if (shapes[n] != l.shape)
      return absl::FailedPreconditionError("a live-out is smaller than the region's shape");
  }
  if (c10::multiply_integers(l.shape) == 0) return absl::FailedPreconditionError("an empty tensor");
  l.out_strides = ContiguousStrides(l.shape);
  for (const at::Tensor& t : inputs) {
    if (t.sizes().vec() == l.shape && t.unsafeGetTensorImpl()->is_non_overlapping_and_dense()) {
      l.out_strides = t.strides().vec();
      break;
    }
  }
  l.walk = PlanWalk(l.shape, l.out_strides, inputs);
  if (static_cast<int>(l.walk.sizes.size()) > kPointwiseMaxRank)
    return absl::FailedPreconditionError("more dimensions than the kernels walk");
  l.signature.input_linear = l.walk.linear;
  l.signature.rank = static_cast<int>(l.walk.sizes.size());
  l.signature.index32 = l.walk.numel < (int64_t{1} << 31);
  auto source = PointwiseForwardSource(region, l.signature);
  if (!source.ok()) return source.status();
  l.source = std::move(*source);
  return l;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The region's forward and backward kernels as one autograd function. forward's inputs are
// the region's inputs; its outputs the live-outs. Kernels run on the current stream.
class PointwiseFunction : public torch::autograd::Function<PointwiseFunction> {
 public:
  // `kernel`: the plan's forward kernel, which RunPointwise found.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               const PointwiseRegion* region, const Launchable* plan,
                               const DeviceKernel* kernel) {
    const c10::Device device = inputs[0].device();
    c10::cuda::CUDAGuard guard(device);
    std::vector<const void*> pointers;
    for (const at::Tensor& t : inputs) pointers.push_back(t.data_ptr());
    variable_list outputs;
    for (int n : region->output_nodes) {
      outputs.push_back(at::empty_strided(plan->shape, plan->out_strides,
                                          inputs[0].options().dtype(plan->dtypes[n])));
      pointers.push_back(outputs.back().data_ptr());
    }
    Launch(*kernel, plan->walk, pointers, device.index());
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["region"] = reinterpret_cast<int64_t>(region);
    ctx->saved_data["shape"] = plan->shape;
    ctx->saved_data["out_strides"] = plan->out_strides;
    std::vector<int64_t> zero_dim;
    for (bool z : plan->signature.input_zero_dim) zero_dim.push_back(z);
    ctx->saved_data["zero_dim"] = zero_dim;
    ctx->saved_data["autocast"] = plan->signature.autocast;
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto* region =
        reinterpret_cast<const PointwiseRegion*>(ctx->saved_data["region"].toInt());
    const variable_list inputs = ctx->get_saved_variables();
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const std::vector<int64_t> out_strides = ctx->saved_data["out_strides"].toIntVector();
    const std::vector<int64_t> zero_dim = ctx->saved_data["zero_dim"].toIntVector();
    const c10::Device device = inputs[0].device();
    c10::cuda::CUDAGuard guard(device);
    PointwiseSignature signature;
    signature.autocast = ctx->saved_data["autocast"].toBool();
    std::vector<at::Tensor> operands(inputs.begin(), inputs.end());
    for (size_t j = 0; j < inputs.size(); ++j) {
      signature.input_dtypes.push_back(inputs[j].scalar_type());
      signature.input_zero_dim.push_back(zero_dim[j] != 0);
      signature.input_needs_grad.push_back(ctx->needs_input_grad(j));
      signature.input_full_shape.push_back(inputs[j].sizes().vec() == shape);
    }
    for (const at::Tensor& g : grad_outputs) {
      signature.output_grad_given.push_back(g.defined());
      if (g.defined()) operands.push_back(g);
    }
    const Walk walk = PlanWalk(shape, out_strides, operands);
    TORCH_CHECK(static_cast<int>(walk.sizes.size()) <= kPointwiseMaxRank, region->where,
                ": a gradient with more dimensions than the kernels walk");
    signature.rank = static_cast<int>(walk.sizes.size());
    signature.index32 = walk.numel < (int64_t{1} << 31);
    signature.input_linear.assign(walk.linear.begin(), walk.linear.begin() + inputs.size());
    signature.output_grad_linear.assign(region->output_nodes.size(), true);
    for (size_t o = 0, k = inputs.size(); o < grad_outputs.size(); ++o) {
      if (grad_outputs[o].defined()) signature.output_grad_linear[o] = walk.linear[k++];
    }
    absl::StatusOr<std::string> source = PointwiseBackwardSource(*region, signature);
    TORCH_CHECK(source.ok(), source.status().ToString());
    absl::StatusOr<DeviceKernel> kernel = KernelFor(device.index(), *source, "pointwise_backward");
    TORCH_CHECK(kernel.ok(), region->where, ": ", kernel.status().ToString());
    std::vector<const void*> pointers;
    for (const at::Tensor& t : operands) pointers.push_back(t.data_ptr());
    variable_list grads(inputs.size() + 3);  // none for region, plan and kernel
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (!signature.input_needs_grad[j]) continue;
      const at::ScalarType t = signature.input_full_shape[j] ? inputs[j].scalar_type() : at::kFloat;
      grads[j] = at::empty_strided(shape, out_strides, inputs[j].options().dtype(t));
      pointers.push_back(grads[j].data_ptr());
    }
    if (walk.numel > 0) Launch(*kernel, walk, pointers, device.index());
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (grads[j].defined() && !signature.input_full_shape[j])
        grads[j] = grads[j].sum_to_size(inputs[j].sizes()).to(inputs[j].scalar_type());
    }
    return grads;
  }
};

#endif  // STOKER_WITH_CUDA

}  // namespace

void RunPointwise(const GraphCall& call, GraphFrame& frame) {
  const PointwiseRegion& region = *call.pointwise;
#ifdef STOKER_WITH_CUDA
  std::vector<at::Tensor> inputs;
  bool tensors = true;
  for (const GraphArg& arg : call.args) {
    const c10::IValue& v = (*frame.values)[arg.slot];
    tensors = tensors && v.isTensor() && v.toTensor().defined();
    if (tensors) inputs.push_back(v.toTensor());
  }
  if (tensors && !inputs.empty() && inputs[0].is_cuda()) {
    // The module loads into the current context: the inputs' device's.
    c10::cuda::CUDAGuard guard(inputs[0].device());
    absl::StatusOr<Launchable> plan = PlanForward(region, inputs);
    const absl::StatusOr<DeviceKernel> kernel =
        plan.ok() ? KernelFor(inputs[0].get_device(), plan->source, "pointwise_forward")
                  : absl::StatusOr<DeviceKernel>(plan.status());
    if (kernel.ok()) {
      const variable_list outputs =
          PointwiseFunction::apply(at::TensorList(inputs), &region, &*plan, &*kernel);
      for (size_t o = 0; o < outputs.size(); ++o) (*frame.values)[call.outputs[o][0]] = outputs[o];
      return;
    }
    LogFallbackOnce(region, kernel.status().ToString());
  }
#endif
  RunPointwiseComposition(region, frame);
}

int64_t PointwiseKernelLaunches() { return launches.load(); }

}  // namespace stoker::trainer
