#include "trainer/graph/pointwise_codegen.h"

#include <dlfcn.h>
#include <link.h>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#ifdef STOKER_WITH_CUDA
#include <nvrtc.h>
#endif

namespace stoker::trainer {
namespace {

bool Supported(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 ||
         t == c10::ScalarType::Half;
}

// Conversions between float and the stored dtypes, without CUDA headers (NVRTC then needs no
// include path on the GPU host): bf16 rounds to nearest even as ATen's does.
constexpr const char* kPrelude = R"(
struct Params { unsigned long long v[PARAM_COUNT]; };
__device__ __forceinline__ float load_f32(const void* p, long long i) {
  return reinterpret_cast<const float*>(p)[i];
}
__device__ __forceinline__ float load_bf16(const void* p, long long i) {
  unsigned int u = reinterpret_cast<const unsigned short*>(p)[i];
  return __uint_as_float(u << 16);
}
__device__ __forceinline__ float load_f16(const void* p, long long i) {
  unsigned short h = reinterpret_cast<const unsigned short*>(p)[i];
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<unsigned short>(u >> 16);
}
__device__ __forceinline__ unsigned short to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float round_bf16(float f) { return __uint_as_float(((unsigned int)to_bf16(f)) << 16); }
__device__ __forceinline__ float round_f16(float f) {
  unsigned short h = to_f16(f);
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
  return r;
}
__device__ __forceinline__ void store_f32(void* p, long long i, float v) { reinterpret_cast<float*>(p)[i] = v; }
__device__ __forceinline__ void store_bf16(void* p, long long i, float v) { reinterpret_cast<unsigned short*>(p)[i] = to_bf16(v); }
__device__ __forceinline__ void store_f16(void* p, long long i, float v) { reinterpret_cast<unsigned short*>(p)[i] = to_f16(v); }
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_erf_grad(float x) {
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
}
__device__ __forceinline__ float gelu_tanh(float x) {
  const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  const float t = tanhf(inner);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
)";

const char* Suffix(c10::ScalarType t) {
  return t == c10::ScalarType::Float ? "f32" : t == c10::ScalarType::BFloat16 ? "bf16" : "f16";
}

// A float literal of `v` for the source.
std::string Literal(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  return absl::StrFormat("%.9ef", static_cast<float>(v));
}

// `value` rounded to `t` where ATen would store it in `t`.
std::string Rounded(const std::string& value, c10::ScalarType t) {
  if (t == c10::ScalarType::BFloat16) return absl::StrCat("round_bf16(", value, ")");
  if (t == c10::ScalarType::Half) return absl::StrCat("round_f16(", value, ")");
  return value;
}

std::string V(int n) { return absl::StrCat("v", n); }

// The float expression of node `n` from its operands' values.
std::string Expression(const PointwiseNode& node) {
  const std::string a = node.operands.empty() ? "" : V(node.operands[0]);
  const std::string b = node.operands.size() > 1 ? V(node.operands[1])
                                                 : (node.has_scalar ? Literal(node.scalar) : "");
  switch (node.op) {
    case PointwiseOp::kAdd:
      return absl::StrCat(a, " + ", b);
    case PointwiseOp::kSub:
      return absl::StrCat(a, " - ", b);
    case PointwiseOp::kMul:
      return absl::StrCat(a, " * ", b);
    case PointwiseOp::kDiv:
      // By a scalar, ATen multiplies by its float reciprocal.
      return node.operands.size() > 1 ? absl::StrCat(a, " / ", b)
                                      : absl::StrCat(a, " * (1.0f / ", b, ")");
    case PointwiseOp::kNeg:
      return absl::StrCat("-", a);
    case PointwiseOp::kRelu:
      return absl::StrCat("(", a, " > 0.0f ? ", a, " : 0.0f)");
    case PointwiseOp::kGelu:
      return absl::StrCat("gelu_erf(", a, ")");
    case PointwiseOp::kGeluTanh:
      return absl::StrCat("gelu_tanh(", a, ")");
    case PointwiseOp::kSilu:
      return absl::StrCat(a, " / (1.0f + expf(-", a, "))");
    case PointwiseOp::kSigmoid:
      return absl::StrCat("sigmoid_f(", a, ")");
    case PointwiseOp::kTanh:
      return absl::StrCat("tanhf(", a, ")");
    case PointwiseOp::kExp:
      return absl::StrCat("expf(", a, ")");
    case PointwiseOp::kRsqrt:
      return absl::StrCat("rsqrtf(", a, ")");
    case PointwiseOp::kSqrt:
      return absl::StrCat("sqrtf(", a, ")");
    case PointwiseOp::kPow:
      if (node.scalar == 2) return absl::StrCat(a, " * ", a);
      if (node.scalar == 1) return a;
      if (node.scalar == 0.5) return absl::StrCat("sqrtf(", a, ")");
      return absl::StrCat("powf(", a, ", ", Literal(node.scalar), ")");
    case PointwiseOp::kClamp: {
      // ATen's clamp propagates NaN.
      std::string v = a;
      if (node.has_min)
        v = absl::StrCat("(", v, " < ", Literal(node.scalar), " ? ", Literal(node.scalar), " : ", v,
                         ")");
      if (node.has_max)
        v = absl::StrCat("(", v, " > ", Literal(node.scalar2), " ? ", Literal(node.scalar2), " : ",
                         v, ")");
      return v;
    }
    case PointwiseOp::kCast:
    case PointwiseOp::kInput:
      return a;
  }
  return a;
}

// Offsets of the non-linear operands (strides at `stride_base` + operand * rank) for index i.
void EmitOffsets(int operands, const std::vector<bool>& linear, int rank, int sizes_base,
                 int strides_base, bool index32, std::string* out) {
  const char* index = index32 ? "unsigned int" : "long long";
  bool any = false;
  for (int j = 0; j < operands; ++j) {
    if (linear[j]) continue;
    absl::StrAppend(out, "    long long off", j, " = 0;\n");
    any = true;
  }
  if (!any) return;
  absl::StrAppend(out, "    {\n      ", index, " rem = (", index, ")i;\n");
  for (int k = rank - 1; k >= 0; --k) {
    if (k > 0) {
      absl::StrAppend(out, "      {\n        const ", index, " size = (", index, ")p.v[",
                      sizes_base + k, "];\n        const long long c = rem % size;\n");
    } else {
      absl::StrAppend(out, "      {\n        const long long c = rem;\n");
    }
    if (k > 0) absl::StrAppend(out, "        rem /= size;\n");
    for (int j = 0; j < operands; ++j) {
      if (linear[j]) continue;
      absl::StrAppend(out, "        off", j, " += c * (long long)p.v[", strides_base + j * rank + k,
                      "];\n");
    }
    absl::StrAppend(out, "      }\n");
  }
  absl::StrAppend(out, "    }\n");
}

std::string Index(int j, const std::vector<bool>& linear) {
  return linear[j] ? "i" : absl::StrCat("off", j);
}

// The forward values of every node, as float locals v<n>.
void EmitForwardValues(const PointwiseRegion& region, const PointwiseSignature& signature,
                       const std::vector<c10::ScalarType>& dtypes, std::string* out) {
  for (size_t n = 0; n < region.nodes.size(); ++n) {
    const PointwiseNode& node = region.nodes[n];
    if (node.op == PointwiseOp::kInput) {
      absl::StrAppend(out, "    const float v", n, " = load_",
                      Suffix(signature.input_dtypes[node.input]), "((const void*)p.v[", node.input,
                      "], ", Index(node.input, signature.input_linear), ");\n");
    } else {
      absl::StrAppend(out, "    const float v", n, " = ", Rounded(Expression(node), dtypes[n]),
                      ";\n");
    }
  }
}

absl::Status CheckSignature(const PointwiseRegion& region, const PointwiseSignature& signature) {
  const size_t inputs = region.input_slots.size();
  if (signature.input_dtypes.size() != inputs || signature.input_zero_dim.size() != inputs ||
      signature.input_linear.size() != inputs || signature.rank < 1 ||
      signature.rank > kPointwiseMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(region.where, ": a kernel signature that does not fit the region"));
  }
  return absl::OkStatus();
}

std::string Header(int param_count) {
  std::string prelude = kPrelude;
  const std::string key = "PARAM_COUNT";
  prelude.replace(prelude.find(key), key.size(), std::to_string(param_count));
  return prelude;
}

}  // namespace

absl::StatusOr<std::vector<c10::ScalarType>> PointwiseNodeDtypes(
    const PointwiseRegion& region, const std::vector<c10::ScalarType>& input_dtypes,
    const std::vector<bool>& input_zero_dim, bool autocast) {
  std::vector<c10::ScalarType> dtypes(region.nodes.size());
  std::vector<bool> zero_dim(region.nodes.size());
  for (size_t n = 0; n < region.nodes.size(); ++n) {
    const PointwiseNode& node = region.nodes[n];
    if (node.op == PointwiseOp::kInput) {
      dtypes[n] = input_dtypes.at(node.input);
      zero_dim[n] = input_zero_dim.at(node.input);
    } else if (node.op == PointwiseOp::kCast) {
      dtypes[n] = node.dtype;
      zero_dim[n] = zero_dim[node.operands[0]];
    } else if (node.operands.size() == 2 && !node.keeps_first_dtype) {
      const int a = node.operands[0], b = node.operands[1];
      if (zero_dim[a] == zero_dim[b]) {
        dtypes[n] = c10::promoteTypes(dtypes[a], dtypes[b]);
      } else {
        dtypes[n] = zero_dim[a] ? dtypes[b] : dtypes[a];  // both floating: the tensor's wins
      }
      zero_dim[n] = zero_dim[a] && zero_dim[b];
    } else {
      dtypes[n] = dtypes[node.operands[0]];
      zero_dim[n] = zero_dim[node.operands[0]];
      if (autocast && (node.op == PointwiseOp::kExp || node.op == PointwiseOp::kRsqrt ||
                       node.op == PointwiseOp::kPow))
        dtypes[n] = c10::ScalarType::Float;
    }
    if (!Supported(dtypes[n])) {
      return absl::InvalidArgumentError(absl::StrCat(region.where, ": a value of dtype ",
                                                     c10::toString(dtypes[n]),
                                                     " (kernels take float, bf16 and fp16)"));
    }
  }
  return dtypes;
}

absl::StatusOr<std::string> PointwiseForwardSource(const PointwiseRegion& region,
                                                   const PointwiseSignature& signature) {
  if (absl::Status s = CheckSignature(region, signature); !s.ok()) return s;
  auto dtypes = PointwiseNodeDtypes(region, signature.input_dtypes, signature.input_zero_dim,
                                    signature.autocast);
  if (!dtypes.ok()) return dtypes.status();
  const int inputs = static_cast<int>(region.input_slots.size());
  const int outputs = static_cast<int>(region.output_nodes.size());
  const int rank = signature.rank;
  const int numel_at = inputs + outputs, sizes_at = numel_at + 1, strides_at = sizes_at + rank;
  std::string src = Header(strides_at + inputs * rank);
  absl::StrAppend(&src, "// ", region.Describe(), "\n",
                  "extern \"C\" __global__ void __launch_bounds__(256) pointwise_forward(const "
                  "Params p) {\n",
                  "  const long long numel = (long long)p.v[", numel_at, "];\n",
                  "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < "
                  "numel;\n       i += (long long)gridDim.x * blockDim.x) {\n");
  EmitOffsets(inputs, signature.input_linear, rank, sizes_at, strides_at, signature.index32, &src);
  EmitForwardValues(region, signature, *dtypes, &src);
  for (int o = 0; o < outputs; ++o) {
    const int n = region.output_nodes[o];
    absl::StrAppend(&src, "    store_", Suffix((*dtypes)[n]), "((void*)p.v[", inputs + o, "], i, v",
                    n, ");\n");
  }
  absl::StrAppend(&src, "  }\n}\n");
  return src;
}

absl::StatusOr<std::string> PointwiseBackwardSource(const PointwiseRegion& region,
                                                    const PointwiseSignature& signature) {
  if (absl::Status s = CheckSignature(region, signature); !s.ok()) return s;
  const int inputs = static_cast<int>(region.input_slots.size());
  const int outputs = static_cast<int>(region.output_nodes.size());
  if (signature.input_needs_grad.size() != static_cast<size_t>(inputs) ||
      signature.input_full_shape.size() != static_cast<size_t>(inputs) ||
      signature.output_grad_given.size() != static_cast<size_t>(outputs) ||
      signature.output_grad_linear.size() != static_cast<size_t>(outputs)) {
    return absl::InvalidArgumentError(
        absl::StrCat(region.where, ": a backward signature that does not fit the region"));
  }
  auto dtypes = PointwiseNodeDtypes(region, signature.input_dtypes, signature.input_zero_dim,
                                    signature.autocast);
  if (!dtypes.ok()) return dtypes.status();
  // Operands with strides: the inputs, then the given output gradients.
  std::vector<int> grad_operand(outputs, -1);
  std::vector<bool> linear = signature.input_linear;
  int operands = inputs;
  for (int o = 0; o < outputs; ++o) {
    if (!signature.output_grad_given[o]) continue;
    grad_operand[o] = operands++;
    linear.push_back(signature.output_grad_linear[o]);
  }
  std::vector<int> grad_input_param(inputs, -1);
  int pointers = operands;
  for (int j = 0; j < inputs; ++j) {
    if (signature.input_needs_grad[j]) grad_input_param[j] = pointers++;
  }
  const int rank = signature.rank;
  const int numel_at = pointers, sizes_at = numel_at + 1, strides_at = sizes_at + rank;
  std::string src = Header(strides_at + operands * rank);
  absl::StrAppend(&src, "// backward of ", region.Describe(), "\n",
                  "extern \"C\" __global__ void __launch_bounds__(256) pointwise_backward(const "
                  "Params p) {\n",
                  "  const long long numel = (long long)p.v[", numel_at, "];\n",
                  "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < "
                  "numel;\n       i += (long long)gridDim.x * blockDim.x) {\n");
  EmitOffsets(operands, linear, rank, sizes_at, strides_at, signature.index32, &src);
  EmitForwardValues(region, signature, *dtypes, &src);
  const size_t nodes = region.nodes.size();
  for (size_t n = 0; n < nodes; ++n) absl::StrAppend(&src, "    float g", n, " = 0.0f;\n");
  for (int o = 0; o < outputs; ++o) {
    if (grad_operand[o] < 0) continue;
    // The gradient of a live-out has the live-out's dtype.
    absl::StrAppend(&src, "    g", region.output_nodes[o], " += load_",
                    Suffix((*dtypes)[region.output_nodes[o]]), "((const void*)p.v[",
                    grad_operand[o], "], ", Index(grad_operand[o], linear), ");\n");
  }
  for (size_t n = nodes; n-- > 0;) {
    const PointwiseNode& node = region.nodes[n];
    if (node.op == PointwiseOp::kInput) continue;
    const std::string g = absl::StrCat("g", n), y = V(n);
    const std::string a = V(node.operands[0]);
    const std::string ga = absl::StrCat("g", node.operands[0]);
    const bool two = node.operands.size() == 2;
    const std::string b = two ? V(node.operands[1]) : Literal(node.scalar);
    const std::string gb = two ? absl::StrCat("g", node.operands[1]) : "";
    switch (node.op) {
      case PointwiseOp::kAdd:
        absl::StrAppend(&src, "    ", ga, " += ", g, ";\n");
        if (two) absl::StrAppend(&src, "    ", gb, " += ", g, ";\n");
        break;
      case PointwiseOp::kSub:
        absl::StrAppend(&src, "    ", ga, " += ", g, ";\n");
        if (two) absl::StrAppend(&src, "    ", gb, " -= ", g, ";\n");
        break;
      case PointwiseOp::kMul:
        absl::StrAppend(&src, "    ", ga, " += ", g, " * ", b, ";\n");
        if (two) absl::StrAppend(&src, "    ", gb, " += ", g, " * ", a, ";\n");
        break;
      case PointwiseOp::kDiv:
        absl::StrAppend(&src, "    ", ga, " += ", g, two ? " / " : " * (1.0f / ", b, two ? "" : ")",
                        ";\n");
        if (two)
          absl::StrAppend(&src, "    ", gb, " -= ", g, " * ", a, " / (", b, " * ", b, ");\n");
        break;
      case PointwiseOp::kNeg:
        absl::StrAppend(&src, "    ", ga, " -= ", g, ";\n");
        break;
      case PointwiseOp::kRelu:
        absl::StrAppend(&src, "    ", ga, " += ", y, " > 0.0f ? ", g, " : 0.0f;\n");
        break;
      case PointwiseOp::kGelu:
        absl::StrAppend(&src, "    ", ga, " += ", g, " * gelu_erf_grad(", a, ");\n");
        break;
      case PointwiseOp::kGeluTanh:
        absl::StrAppend(&src, "    ", ga, " += ", g, " * gelu_tanh_grad(", a, ");\n");
        break;
      case PointwiseOp::kSilu:
        absl::StrAppend(&src, "    { const float s = sigmoid_f(", a, "); ", ga, " += ", g,
                        " * s * (1.0f + ", a, " * (1.0f - s)); }\n");
        break;
      case PointwiseOp::kSigmoid:
        absl::StrAppend(&src, "    ", ga, " += ", g, " * (1.0f - ", y, ") * ", y, ";\n");
        break;
      case PointwiseOp::kTanh:
        absl::StrAppend(&src, "    ", ga, " += ", g, " * (1.0f - ", y, " * ", y, ");\n");
        break;
      case PointwiseOp::kExp:
        absl::StrAppend(&src, "    ", ga, " += ", g, " * ", y, ";\n");
        break;
      case PointwiseOp::kRsqrt:
        absl::StrAppend(&src, "    ", ga, " += -0.5f * ", g, " * ", y, " * ", y, " * ", y, ";\n");
        break;
      case PointwiseOp::kSqrt:
        absl::StrAppend(&src, "    ", ga, " += ", g, " / (2.0f * ", y, ");\n");
        break;
      case PointwiseOp::kPow:
        if (node.scalar != 0) {
          absl::StrAppend(&src, "    ", ga, " += ", g, " * ", Literal(node.scalar), " * powf(", a,
                          ", ", Literal(node.scalar - 1), ");\n");
        }
        break;
      case PointwiseOp::kClamp: {
        std::string inside = "true";
        if (node.has_min) inside = absl::StrCat(inside, " && ", a, " >= ", Literal(node.scalar));
        if (node.has_max) inside = absl::StrCat(inside, " && ", a, " <= ", Literal(node.scalar2));
        absl::StrAppend(&src, "    ", ga, " += (", inside, ") ? ", g, " : 0.0f;\n");
        break;
      }
      case PointwiseOp::kCast:
        absl::StrAppend(&src, "    ", ga, " += ", g, ";\n");
        break;
      case PointwiseOp::kInput:
        break;
    }
  }
  for (int j = 0; j < inputs; ++j) {
    if (grad_input_param[j] < 0) continue;
    const c10::ScalarType t =
        signature.input_full_shape[j] ? signature.input_dtypes[j] : c10::ScalarType::Float;
    absl::StrAppend(&src, "    store_", Suffix(t), "((void*)p.v[", grad_input_param[j], "], i, g",
                    j, ");\n");
  }
  absl::StrAppend(&src, "  }\n}\n");
  return src;
}

#ifdef STOKER_WITH_CUDA
namespace {

// NVRTC's entry points, from the library loaded at run time: the trainer needs no NVRTC to
// start, and finds the one its CUDA runtime came with.
struct Nvrtc {
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&nvrtcGetPTX) ptx = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcGetErrorString) error = nullptr;
  std::string load_error;
};

// The folder of the loaded libcudart (libtorch_cuda brings it from its own folder), else "".
std::string LoadedCudartFolder() {
  std::string folder;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const size_t slash = name.rfind('/');
        if (slash != std::string::npos && name.find("libcudart.so", slash) != std::string::npos) {
          *static_cast<std::string*>(data) = name.substr(0, slash);
          return 1;
        }
        return 0;
      },
      &folder);
  return folder;
}

const Nvrtc& LoadNvrtc() {
  static const Nvrtc* const kNvrtc = [] {
    auto* nvrtc = new Nvrtc();
    std::vector<std::string> candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    const std::string cudart = LoadedCudartFolder();
    if (!cudart.empty()) candidates.push_back(cudart + "/libnvrtc.so.13");
    candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    void* library = nullptr;
    for (const std::string& name : candidates) {
      library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library != nullptr) break;
    }
    if (library == nullptr) {
      nvrtc->load_error = absl::StrCat("no NVRTC library loads (tried ", candidates.front(),
                                       " and ", candidates.size() - 1, " more)");
      return nvrtc;
    }
    auto find = [&](auto* fn, const char* symbol) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(library, symbol));
      if (*fn == nullptr && nvrtc->load_error.empty())
        nvrtc->load_error = absl::StrCat("the NVRTC library lacks ", symbol);
    };
    find(&nvrtc->create, "nvrtcCreateProgram");
    find(&nvrtc->compile, "nvrtcCompileProgram");
    find(&nvrtc->log_size, "nvrtcGetProgramLogSize");
    find(&nvrtc->log, "nvrtcGetProgramLog");
    find(&nvrtc->ptx_size, "nvrtcGetPTXSize");
    find(&nvrtc->ptx, "nvrtcGetPTX");
    find(&nvrtc->cubin_size, "nvrtcGetCUBINSize");
    find(&nvrtc->cubin, "nvrtcGetCUBIN");
    find(&nvrtc->destroy, "nvrtcDestroyProgram");
    find(&nvrtc->error, "nvrtcGetErrorString");
    return nvrtc;
  }();
  return *kNvrtc;
}

}  // namespace

absl::StatusOr<std::string> CompilePointwiseSource(const std::string& source, int major, int minor,
                                                   bool cubin) {
  const Nvrtc& nvrtc = LoadNvrtc();
  if (!nvrtc.load_error.empty()) return absl::UnavailableError(nvrtc.load_error);
  nvrtcProgram program = nullptr;
  nvrtcResult r = nvrtc.create(&program, source.c_str(), "pointwise.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return absl::InternalError(absl::StrCat("nvrtcCreateProgram: ", nvrtc.error(r)));
  const std::string arch =
      absl::StrCat("--gpu-architecture=", cubin ? "sm_" : "compute_", major, minor);
  const char* options[] = {arch.c_str(), "--std=c++17", "-default-device"};
  r = nvrtc.compile(program, 3, options);
  size_t log_size = 0;
  nvrtc.log_size(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtc.log(program, log.data());
  std::string image;
  if (r == NVRTC_SUCCESS) {
    size_t size = 0;
    r = cubin ? nvrtc.cubin_size(program, &size) : nvrtc.ptx_size(program, &size);
    image.resize(size);
    if (r == NVRTC_SUCCESS)
      r = cubin ? nvrtc.cubin(program, image.data()) : nvrtc.ptx(program, image.data());
  }
  nvrtc.destroy(&program);
  if (r != NVRTC_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("NVRTC (", arch, "): ", nvrtc.error(r), "\n", log, "\nsource:\n", source));
  }
  return image;
}
#else
absl::StatusOr<std::string> CompilePointwiseSource(const std::string&, int, int, bool) {
  return absl::UnavailableError("built without CUDA: no NVRTC");
}
#endif

}  // namespace stoker::trainer
