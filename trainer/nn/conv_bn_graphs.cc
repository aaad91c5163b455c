// The cuDNN graphs of conv_bn_graphs.h, built with cudnn-frontend.
//
// Note [cuDNN as libtorch loads it]: cudnn-frontend is compiled with dynamic loading
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): it calls cuDNN through the handle below, which
// is libcudnn.so.9 as libtorch_cuda already loaded it (RTLD_NOLOAD finds it by its soname),
// so the graphs run on the same cuDNN as torch's own convolutions, and no binary links a
// second copy. The CUDA runtime is found the same way (libcudart.so.13, already loaded).
#include "trainer/nn/conv_bn_graphs.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cudnn_frontend {
// cudnn-frontend's dynamic-loading hook (Note [cuDNN as libtorch loads it]).
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace stoker::trainer {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Fixed uids, one per role of ConvBnTensors.
enum Role : int64_t {
  kX = 1,
  kW,
  kY,
  kDy,
  kG,
  kDw,
  kScale,
  kShift,
  kMean,
  kInvstd,
  kGamma,
  kBeta,
  kSum,
  kSumSq,
  kDgamma,
  kDbeta,
  kEqScaleDy,
  kEqScaleX,
  kEqBias,
};

void* PointerOf(const ConvBnTensors& t, int64_t role) {
  switch (role) {
    case kX:
      return const_cast<void*>(t.x);
    case kW:
      return const_cast<void*>(t.w);
    case kY:
      return t.y;
    case kDy:
      return const_cast<void*>(t.dy);
    case kG:
      return t.g;
    case kDw:
      return t.dw;
    case kScale:
      return const_cast<void*>(t.scale);
    case kShift:
      return const_cast<void*>(t.shift);
    case kMean:
      return const_cast<float*>(t.mean);
    case kInvstd:
      return const_cast<float*>(t.invstd);
    case kGamma:
      return const_cast<float*>(t.gamma);
    case kBeta:
      return const_cast<float*>(t.beta);
    case kSum:
      return t.sum;
    case kSumSq:
      return t.sum_sq;
    case kDgamma:
      return t.dgamma;
    case kDbeta:
      return t.dbeta;
    case kEqScaleDy:
      return t.eq_scale_dy;
    case kEqScaleX:
      return t.eq_scale_x;
    case kEqBias:
      return t.eq_bias;
    default:
      return nullptr;
  }
}

fe::DataType_t FrontendType(ElementType type) {
  switch (type) {
    case ElementType::kFloat16:
      return fe::DataType_t::HALF;
    case ElementType::kBFloat16:
      return fe::DataType_t::BFLOAT16;
    default:
      return fe::DataType_t::FLOAT;
  }
}

// NHWC strides of an [n, c, h, w] tensor.
std::vector<int64_t> ChannelsLast(int64_t n, int64_t c, int64_t h, int64_t w) {
  (void)n;
  return {c * h * w, 1, c * w, c};
}

TensorPtr Activation(fe::graph::Graph& graph, Role role, int64_t n, int64_t c, int64_t h,
                     int64_t w) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(absl::StrCat("t", role))
                          .set_uid(role)
                          .set_dim({n, c, h, w})
                          .set_stride(ChannelsLast(n, c, h, w)));
}

TensorPtr PerChannel(fe::graph::Graph& graph, Role role, int64_t c, fe::DataType_t type) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(absl::StrCat("t", role))
                          .set_uid(role)
                          .set_dim({1, c, 1, 1})
                          .set_stride({c, 1, c, c})
                          .set_data_type(type));
}

void MarkOutput(const TensorPtr& t, Role role, fe::DataType_t type) {
  t->set_output(true).set_uid(role).set_name(absl::StrCat("t", role)).set_data_type(type);
}

// relu(x * scale + shift), the previous batch norm applied to a convolution operand.
TensorPtr NormRelu(fe::graph::Graph& graph, const TensorPtr& x, int64_t c,
                   fe::DataType_t scale_type) {
  TensorPtr scale = PerChannel(graph, kScale, c, scale_type);
  TensorPtr shift = PerChannel(graph, kShift, c, scale_type);
  TensorPtr scaled = graph.pointwise(
      x, scale, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
  TensorPtr shifted = graph.pointwise(
      scaled, shift, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  return graph.pointwise(shifted,
                         fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
}

// One way of expressing a kind's graph: the type of scale/shift and of the intermediates.
struct Variant {
  fe::DataType_t scale_type;
  fe::DataType_t intermediate_type;
};

// Declares the graph of `kind` (validate() not yet called).
void Declare(fe::graph::Graph& graph, ConvBnGraph kind, const ConvShape& s, const Variant& v) {
  const fe::DataType_t io = FrontendType(s.type);
  graph.set_io_data_type(io)
      .set_intermediate_data_type(v.intermediate_type)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t n = s.batch, c = s.in_channels, h = s.height, w = s.width, k = s.out_channels;
  const int64_t p = s.out_height(), q = s.out_width(), r = s.kernel;
  auto filter = [&](Role role) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(absl::StrCat("t", role))
                            .set_uid(role)
                            .set_dim({k, c, r, r})
                            .set_stride({c * r * r, 1, c * r, c}));
  };
  switch (kind) {
    case ConvBnGraph::kForwardStats:
    case ConvBnGraph::kNormReluForwardStats: {
      TensorPtr x = Activation(graph, kX, n, c, h, w);
      TensorPtr operand =
          kind == ConvBnGraph::kForwardStats ? x : NormRelu(graph, x, c, v.scale_type);
      TensorPtr y = graph.conv_fprop(operand, filter(kW),
                                     fe::graph::Conv_fprop_attributes()
                                         .set_padding({s.padding, s.padding})
                                         .set_stride({s.stride, s.stride})
                                         .set_dilation({1, 1}));
      MarkOutput(y, kY, io);
      auto [sum, sum_sq] = graph.genstats(y, fe::graph::Genstats_attributes());
      MarkOutput(sum, kSum, fe::DataType_t::FLOAT);
      MarkOutput(sum_sq, kSumSq, fe::DataType_t::FLOAT);
      return;
    }
    case ConvBnGraph::kDgradReluNormWeight: {
      TensorPtr dy = Activation(graph, kDy, n, k, p, q);
      TensorPtr da = graph.conv_dgrad(dy, filter(kW),
                                      fe::graph::Conv_dgrad_attributes()
                                          .set_padding({s.padding, s.padding})
                                          .set_stride({s.stride, s.stride})
                                          .set_dilation({1, 1}));
      da->set_dim({n, c, h, w});
      TensorPtr x = Activation(graph, kX, n, c, h, w);
      TensorPtr mean = PerChannel(graph, kMean, c, fe::DataType_t::FLOAT);
      TensorPtr invstd = PerChannel(graph, kInvstd, c, fe::DataType_t::FLOAT);
      TensorPtr gamma = PerChannel(graph, kGamma, c, fe::DataType_t::FLOAT);
      TensorPtr beta = PerChannel(graph, kBeta, c, fe::DataType_t::FLOAT);
      auto op = [](fe::PointwiseMode_t mode) {
        return fe::graph::Pointwise_attributes().set_mode(mode);
      };
      TensorPtr centred = graph.pointwise(x, mean, op(fe::PointwiseMode_t::SUB));
      TensorPtr normalised = graph.pointwise(centred, invstd, op(fe::PointwiseMode_t::MUL));
      TensorPtr scaled = graph.pointwise(normalised, gamma, op(fe::PointwiseMode_t::MUL));
      TensorPtr bn = graph.pointwise(scaled, beta, op(fe::PointwiseMode_t::ADD));
      TensorPtr g = graph.pointwise(da, bn, op(fe::PointwiseMode_t::RELU_BWD));
      MarkOutput(g, kG, io);
      auto [dgamma, dbeta, eq_scale_dy, eq_scale_x, eq_bias] =
          graph.dbn_weight(g, x, mean, invstd, gamma, fe::graph::DBN_weight_attributes());
      MarkOutput(dgamma, kDgamma, fe::DataType_t::FLOAT);
      MarkOutput(dbeta, kDbeta, fe::DataType_t::FLOAT);
      MarkOutput(eq_scale_dy, kEqScaleDy, fe::DataType_t::FLOAT);
      MarkOutput(eq_scale_x, kEqScaleX, fe::DataType_t::FLOAT);
      MarkOutput(eq_bias, kEqBias, fe::DataType_t::FLOAT);
      return;
    }
    case ConvBnGraph::kNormReluWgrad: {
      TensorPtr x = Activation(graph, kX, n, c, h, w);
      TensorPtr dy = Activation(graph, kDy, n, k, p, q);
      TensorPtr dw = graph.conv_wgrad(dy, NormRelu(graph, x, c, v.scale_type),
                                      fe::graph::Conv_wgrad_attributes()
                                          .set_padding({s.padding, s.padding})
                                          .set_stride({s.stride, s.stride})
                                          .set_dilation({1, 1}));
      dw->set_dim({k, c, r, r});
      MarkOutput(dw, kDw, io);
      return;
    }
  }
}

// The variants tried in order: fp32 scale/shift and intermediates first (the exact
// composition), then what the engines of older cuDNN releases asked for.
std::vector<Variant> VariantsOf(ConvBnGraph kind, ElementType type) {
  const fe::DataType_t io = FrontendType(type), f32 = fe::DataType_t::FLOAT;
  switch (kind) {
    case ConvBnGraph::kForwardStats:
      return {{f32, f32}};
    case ConvBnGraph::kDgradReluNormWeight:
      return {{f32, f32}, {f32, io}};
    case ConvBnGraph::kNormReluForwardStats:
    case ConvBnGraph::kNormReluWgrad:
      return {{f32, f32}, {io, f32}, {io, io}};
  }
  return {};
}

#define STOKER_FE_TRY(expr, stage)                                                     \
  do {                                                                                 \
    fe::error_t fe_status = (expr);                                                    \
    if (fe_status.is_bad()) return absl::StrCat(stage, ": ", fe_status.get_message()); \
  } while (0)

// Builds `graph`'s plan; an empty string on success, else the stage that failed and why.
std::string Build(fe::graph::Graph& graph, cudnnHandle_t handle) {
  STOKER_FE_TRY(graph.validate(), "validate");
  STOKER_FE_TRY(graph.build_operation_graph(handle), "build_operation_graph");
  STOKER_FE_TRY(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                "create_execution_plans");
  STOKER_FE_TRY(graph.check_support(), "check_support");
  STOKER_FE_TRY(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
  return "";
}

#undef STOKER_FE_TRY

using CudnnSetStreamFn = cudnnStatus_t (*)(cudnnHandle_t, cudaStream_t);

struct Entry {
  absl::Status status;
  std::unique_ptr<fe::graph::Graph> graph;
  ConvBnPlanInfo info;
  std::vector<int64_t> roles;  // the uids the graph reads or writes
};

// The process's graphs and cuDNN handles. Thread-safe: everything under mu.
struct Registry {
  std::mutex mu;
  std::map<std::tuple<int, int, std::string>, Entry> entries;  // (device, kind, shape)
  std::map<int, cudnnHandle_t> handles;                        // by device; never destroyed
  CudnnSetStreamFn set_stream = nullptr;
  absl::Status loaded = absl::FailedPreconditionError("cuDNN not loaded yet");
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed: handles outlive exit
  return *registry;
}

// Finds libcudnn.so.9 (Note [cuDNN as libtorch loads it]). Requires registry.mu held.
absl::Status LoadCudnn(Registry& registry) {
  if (registry.loaded.ok()) return registry.loaded;
  // The CUDA 13 runtime libtorch uses, even where a CUDA 12 one is also on the library path
  // (cudnn-frontend would otherwise take the first it finds). A user's own choice stays.
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", /*overwrite=*/0);
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    registry.loaded =
        absl::NotFoundError(absl::StrCat("conv_bn_graphs: cannot load libcudnn.so.9: ",
                                         why != nullptr ? why : "unknown dlopen error"));
    return registry.loaded;
  }
  registry.set_stream = reinterpret_cast<CudnnSetStreamFn>(dlsym(lib, "cudnnSetStream"));
  if (registry.set_stream == nullptr) {
    registry.loaded = absl::NotFoundError("conv_bn_graphs: libcudnn.so.9 lacks cudnnSetStream");
    return registry.loaded;
  }
  fe::cudnn_dlhandle = lib;
  registry.loaded = absl::OkStatus();
  return registry.loaded;
}

// The current device's handle, created on first use. Requires registry.mu held.
absl::StatusOr<cudnnHandle_t> HandleOf(Registry& registry, int device) {
  auto it = registry.handles.find(device);
  if (it != registry.handles.end()) return it->second;
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t status = fe::detail::create_handle(&handle);
  if (status != CUDNN_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("conv_bn_graphs: cudnnCreate on device ", device,
                                            " failed with status ", static_cast<int>(status)));
  }
  registry.handles.emplace(device, handle);
  return handle;
}

std::vector<int64_t> RolesOf(ConvBnGraph kind) {
  switch (kind) {
    case ConvBnGraph::kForwardStats:
      return {kX, kW, kY, kSum, kSumSq};
    case ConvBnGraph::kNormReluForwardStats:
      return {kX, kW, kY, kSum, kSumSq, kScale, kShift};
    case ConvBnGraph::kDgradReluNormWeight:
      return {kDy, kW,      kX,     kMean,      kInvstd,   kGamma, kBeta,
              kG,  kDgamma, kDbeta, kEqScaleDy, kEqScaleX, kEqBias};
    case ConvBnGraph::kNormReluWgrad:
      return {kX, kDy, kScale, kShift, kDw};
  }
  return {};
}

ElementType ElementTypeOf(fe::DataType_t type, ElementType io) {
  return type == fe::DataType_t::FLOAT ? ElementType::kFloat32 : io;
}

// Builds the entry of (kind, shape) on `handle`: the first variant that has an engine.
Entry BuildEntry(ConvBnGraph kind, const ConvShape& shape, cudnnHandle_t handle) {
  Entry entry;
  entry.roles = RolesOf(kind);
  std::vector<std::string> reasons;
  for (const Variant& variant : VariantsOf(kind, shape.type)) {
    auto graph = std::make_unique<fe::graph::Graph>();
    std::string why;
    try {
      Declare(*graph, kind, shape, variant);
      why = Build(*graph, handle);
    } catch (const std::exception& e) {
      why = absl::StrCat("exception: ", e.what());
    }
    if (why.empty()) {
      int64_t workspace = 0;
      fe::error_t ws = graph->get_workspace_size(workspace);
      if (ws.is_good()) {
        entry.graph = std::move(graph);
        entry.info.workspace_bytes = workspace;
        entry.info.scale_type = ElementTypeOf(variant.scale_type, shape.type);
        entry.status = absl::OkStatus();
        return entry;
      }
      why = absl::StrCat("get_workspace_size: ", ws.get_message());
    }
    reasons.push_back(
        absl::StrFormat("[scale %s, intermediates %s] %s",
                        variant.scale_type == fe::DataType_t::FLOAT ? "fp32" : "io",
                        variant.intermediate_type == fe::DataType_t::FLOAT ? "fp32" : "io", why));
  }
  entry.status =
      absl::NotFoundError(absl::StrCat("cuDNN has no engine for ", ConvBnGraphName(kind), " ",
                                       shape.ToString(), ": ", absl::StrJoin(reasons, "; ")));
  return entry;
}

// The entry of (kind, shape) on the current device, built on first use. Requires
// registry.mu held.
absl::StatusOr<Entry*> EntryOf(Registry& registry, ConvBnGraph kind, const ConvShape& shape,
                               cudnnHandle_t* handle_out) {
  absl::Status loaded = LoadCudnn(registry);
  if (!loaded.ok()) return loaded;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return absl::InternalError("conv_bn_graphs: cudaGetDevice failed");
  }
  absl::StatusOr<cudnnHandle_t> handle = HandleOf(registry, device);
  if (!handle.ok()) return handle.status();
  *handle_out = *handle;
  const auto key = std::make_tuple(device, static_cast<int>(kind), shape.ToString());
  auto it = registry.entries.find(key);
  if (it == registry.entries.end()) {
    it = registry.entries.emplace(key, BuildEntry(kind, shape, *handle)).first;
  }
  return &it->second;
}

}  // namespace

std::string ConvShape::ToString() const {
  const char* type_name = type == ElementType::kBFloat16  ? "bf16"
                          : type == ElementType::kFloat16 ? "fp16"
                                                          : "other";
  return absl::StrFormat("n%d c%d h%d w%d k%d r%d s%d p%d %s", batch, in_channels, height, width,
                         out_channels, kernel, stride, padding, type_name);
}

const char* ConvBnGraphName(ConvBnGraph kind) {
  switch (kind) {
    case ConvBnGraph::kForwardStats:
      return "forward_stats";
    case ConvBnGraph::kNormReluForwardStats:
      return "norm_relu_forward_stats";
    case ConvBnGraph::kDgradReluNormWeight:
      return "dgrad_relu_norm_weight";
    case ConvBnGraph::kNormReluWgrad:
      return "norm_relu_wgrad";
  }
  return "unknown";
}

absl::StatusOr<ConvBnPlanInfo> PrepareConvBnGraph(ConvBnGraph kind, const ConvShape& shape) {
  if (shape.type != ElementType::kBFloat16 && shape.type != ElementType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv_bn_graphs: ", shape.ToString(), ": activations must be bf16 or fp16"));
  }
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  cudnnHandle_t handle = nullptr;
  absl::StatusOr<Entry*> entry = EntryOf(registry, kind, shape, &handle);
  if (!entry.ok()) return entry.status();
  if (!(*entry)->status.ok()) return (*entry)->status;
  return (*entry)->info;
}

absl::Status RunConvBnGraph(ConvBnGraph kind, const ConvShape& shape, const ConvBnTensors& tensors,
                            void* workspace, cudaStream_t stream) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  cudnnHandle_t handle = nullptr;
  absl::StatusOr<Entry*> found = EntryOf(registry, kind, shape, &handle);
  if (!found.ok()) return found.status();
  Entry& entry = **found;
  if (!entry.status.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("RunConvBnGraph without a plan: ", entry.status.message()));
  }
  std::unordered_map<int64_t, void*> pack;
  for (int64_t role : entry.roles) {
    void* p = PointerOf(tensors, role);
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("RunConvBnGraph ", ConvBnGraphName(kind),
                                                     ": tensor role ", role, " is null"));
    }
    pack.emplace(role, p);
  }
  const cudnnStatus_t set = registry.set_stream(handle, stream);
  if (set != CUDNN_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("RunConvBnGraph: cudnnSetStream failed with status ", static_cast<int>(set)));
  }
  try {
    fe::error_t status = entry.graph->execute(handle, pack, workspace);
    if (status.is_bad()) {
      return absl::InternalError(absl::StrCat("RunConvBnGraph ", ConvBnGraphName(kind), " ",
                                              shape.ToString(), ": ", status.get_message()));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("RunConvBnGraph ", ConvBnGraphName(kind), " ",
                                            shape.ToString(), ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
