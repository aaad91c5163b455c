#include "trainer/graph/operator_allowlist.h"

#include <iterator>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace stoker::trainer {

// Note [Operator allowlist]
// An archive's graph is data, and a node may name any operator this libtorch registers
// under aten, with string, bool and integer arguments of the archive's choosing. Some of
// those reach outside the program's tensors: aten::from_file maps a file MAP_SHARED (and a
// following copy_ writes through it), others save, print, pin host memory, synchronise
// with the host, touch streams or replace a tensor's storage. So a program calls only the
// operators of the table below: each computes on tensors alone, and every tensor it can
// reach is a graph value (a weight, the image batch or another call's result), so an
// in-place or out= write lands in the program's own values. Device arguments are the run's
// device whatever the archive says (Note [Devices of a program]), so creation ops and
// casts (to, _to_copy) cannot move data elsewhere. Ops whose output size depends on the
// data (nonzero, masked_select, unique) are left out: they wait on the GPU. The table
// holds every operator torchvision's classifiers use (tools/list_model_operators.py
// prints them) and their obvious neighbours; adding an operator is a review of what it
// can touch.

namespace {

// The table, one operator a line, sorted within each group.
// clang-format off
constexpr absl::string_view kPointwiseMath[] = {
    "aten::abs",
    "aten::abs_",
    "aten::acos",
    "aten::add",
    "aten::add_",
    "aten::addcdiv",
    "aten::addcdiv_",
    "aten::addcmul",
    "aten::addcmul_",
    "aten::asin",
    "aten::atan",
    "aten::atan2",
    "aten::bitwise_and",
    "aten::bitwise_not",
    "aten::bitwise_or",
    "aten::bitwise_xor",
    "aten::ceil",
    "aten::clamp",
    "aten::clamp_",
    "aten::clamp_max",
    "aten::clamp_min",
    "aten::clamp_min_",
    "aten::clip",
    "aten::cos",
    "aten::cosh",
    "aten::div",
    "aten::div_",
    "aten::eq",
    "aten::erf",
    "aten::erfinv",
    "aten::exp",
    "aten::exp2",
    "aten::expm1",
    "aten::floor",
    "aten::floor_divide",
    "aten::fmod",
    "aten::frac",
    "aten::ge",
    "aten::gt",
    "aten::isfinite",
    "aten::isinf",
    "aten::isnan",
    "aten::le",
    "aten::lerp",
    "aten::lerp_",
    "aten::log",
    "aten::log10",
    "aten::log1p",
    "aten::log2",
    "aten::logical_and",
    "aten::logical_not",
    "aten::logical_or",
    "aten::logical_xor",
    "aten::lt",
    "aten::masked_fill",
    "aten::masked_fill_",
    "aten::maximum",
    "aten::minimum",
    "aten::mul",
    "aten::mul_",
    "aten::nan_to_num",
    "aten::ne",
    "aten::neg",
    "aten::pow",
    "aten::reciprocal",
    "aten::remainder",
    "aten::round",
    "aten::rsqrt",
    "aten::rsub",
    "aten::sign",
    "aten::sin",
    "aten::sinh",
    "aten::sqrt",
    "aten::square",
    "aten::sub",
    "aten::sub_",
    "aten::tan",
    "aten::tanh",
    "aten::tanh_",
    "aten::true_divide",
    "aten::trunc",
    "aten::where.Scalar",
    "aten::where.ScalarOther",
    "aten::where.ScalarSelf",
    "aten::where.self",
};
constexpr absl::string_view kActivations[] = {
    "aten::celu",       "aten::elu",         "aten::elu_",        "aten::gelu",
    "aten::gelu_",      "aten::glu",         "aten::hardsigmoid", "aten::hardsigmoid_",
    "aten::hardswish",  "aten::hardswish_",  "aten::hardtanh",    "aten::hardtanh_",
    "aten::leaky_relu", "aten::leaky_relu_", "aten::log_sigmoid", "aten::mish",
    "aten::mish_",      "aten::prelu",       "aten::relu",        "aten::relu6",
    "aten::relu_",      "aten::selu",        "aten::selu_",       "aten::sigmoid",
    "aten::sigmoid_",   "aten::silu",        "aten::silu_",       "aten::softplus",
    "aten::threshold",  "aten::threshold_",
};
constexpr absl::string_view kReductions[] = {
    "aten::_log_softmax",
    "aten::_softmax",
    "aten::all",
    "aten::amax",
    "aten::amin",
    "aten::any",
    "aten::argmax",
    "aten::argmin",
    "aten::cumprod",
    "aten::cumsum",
    "aten::linalg_vector_norm",
    "aten::log_softmax.int",
    "aten::logsumexp",
    "aten::max",
    "aten::mean",
    "aten::min",
    "aten::norm",
    "aten::prod",
    "aten::softmax.int",
    "aten::sort",
    "aten::std",
    "aten::std_mean",
    "aten::sum",
    "aten::topk",
    "aten::var",
    "aten::var_mean",
};
constexpr absl::string_view kLinearAlgebra[] = {
    "aten::addmm",
    "aten::baddbmm",
    "aten::bmm",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d.input",
    "aten::conv_transpose3d.input",
    "aten::convolution",
    "aten::einsum",
    "aten::linear",
    "aten::matmul",
    "aten::mm",
};
constexpr absl::string_view kNormalisation[] = {
    "aten::_native_batch_norm_legit_functional",
    "aten::_native_batch_norm_legit_no_training",
    "aten::batch_norm",
    "aten::group_norm",
    "aten::instance_norm",
    "aten::layer_norm",
    "aten::native_batch_norm",
    "aten::native_group_norm",
    "aten::native_layer_norm",
    "aten::rms_norm",
};
constexpr absl::string_view kPoolingAndResampling[] = {
    "aten::_adaptive_avg_pool2d",
    "aten::adaptive_avg_pool1d",
    "aten::adaptive_avg_pool2d",
    "aten::adaptive_avg_pool3d",
    "aten::adaptive_max_pool2d",
    "aten::avg_pool1d",
    "aten::avg_pool2d",
    "aten::avg_pool3d",
    "aten::constant_pad_nd",
    "aten::max_pool1d",
    "aten::max_pool2d",
    "aten::max_pool2d_with_indices",
    "aten::max_pool3d",
    "aten::pad",
    "aten::pixel_shuffle",
    "aten::pixel_unshuffle",
    "aten::reflection_pad2d",
    "aten::replication_pad2d",
    "aten::upsample_bilinear2d",
    "aten::upsample_nearest2d",
};
constexpr absl::string_view kAttention[] = {
    "aten::scaled_dot_product_attention",
};
constexpr absl::string_view kRandom[] = {
    "aten::alpha_dropout",
    "aten::alpha_dropout_",
    "aten::bernoulli",
    "aten::bernoulli_",
    "aten::dropout",
    "aten::dropout_",
    "aten::feature_alpha_dropout",
    "aten::feature_dropout",
    "aten::native_dropout",
    "aten::normal",
    "aten::normal_",
    "aten::rand",
    "aten::rand_like",
    "aten::randint",
    "aten::randn",
    "aten::randn_like",
    "aten::randperm",
    "aten::uniform_",
};
constexpr absl::string_view kViewsAndIndexing[] = {
    "aten::alias",
    "aten::cat",
    "aten::chunk",
    "aten::contiguous",
    "aten::detach",
    "aten::expand",
    "aten::expand_as",
    "aten::flatten.using_ints",
    "aten::flip",
    "aten::gather",
    "aten::index.Tensor",
    "aten::index_add",
    "aten::index_put",
    "aten::index_put_",
    "aten::index_select",
    "aten::movedim.int",
    "aten::narrow",
    "aten::permute",
    "aten::repeat",
    "aten::reshape",
    "aten::roll",
    "aten::scatter",
    "aten::scatter_add",
    "aten::select.int",
    "aten::slice.Tensor",
    "aten::split.Tensor",
    "aten::split_with_sizes",
    "aten::squeeze",
    "aten::stack",
    "aten::swapaxes",
    "aten::swapdims",
    "aten::t",
    "aten::tile",
    "aten::transpose.int",
    "aten::tril",
    "aten::triu",
    "aten::unbind.int",
    "aten::unflatten.int",
    "aten::unsqueeze",
    "aten::view",
};
constexpr absl::string_view kNewTensorsAndCasts[] = {
    "aten::_to_copy",
    "aten::arange",
    "aten::clone",
    "aten::copy_",
    "aten::empty.memory_format",
    "aten::empty_like",
    "aten::fill_",
    "aten::full",
    "aten::full_like",
    "aten::lift_fresh_copy",
    "aten::linspace",
    "aten::new_empty",
    "aten::new_full",
    "aten::new_ones",
    "aten::new_zeros",
    "aten::ones",
    "aten::ones_like",
    "aten::scalar_tensor",
    "aten::to",
    "aten::type_as",
    "aten::zero_",
    "aten::zeros",
    "aten::zeros_like",
};
constexpr absl::string_view kSizeQueries[] = {
    "aten::sym_numel",
    "aten::sym_size.int",
    "aten::sym_stride.int",
};
// clang-format on

}  // namespace

const std::vector<AllowedOperatorGroup>& AllowedOperatorGroups() {
  auto group = [](absl::string_view why, auto& operators) {
    return AllowedOperatorGroup{why, {std::begin(operators), std::end(operators)}};
  };
  static const auto* const kGroups = new std::vector<AllowedOperatorGroup>{
      group("pointwise math: elementwise arithmetic, comparisons and logic on tensors and scalars",
            kPointwiseMath),
      group("activations: pointwise nonlinearities", kActivations),
      group("reductions, scans, softmax and sorting along dimensions", kReductions),
      group("linear algebra and convolutions", kLinearAlgebra),
      group("normalisation layers", kNormalisation),
      group("pooling, padding and resampling of images", kPoolingAndResampling),
      group("attention", kAttention),
      group("random ops: seeded from the program's generator (CheckSeeded refuses any without one)",
            kRandom),
      group("views, layout, indexing and joining of graph values", kViewsAndIndexing),
      group("new tensors, copies and dtype casts, on the run's device", kNewTensorsAndCasts),
      group("size queries, run as the program's own size arithmetic", kSizeQueries),
  };
  return *kGroups;
}

namespace {

// Why Stoker does not run `name`: the reason of the first family it belongs to.
std::string WhyRefused(const c10::OperatorName& name) {
  struct Family {
    std::vector<absl::string_view> fragments;  // of the name, after "aten::"
    absl::string_view why;
  };
  static const auto* const kFamilies = new std::vector<Family>{
      {{"file", "save", "load"}, "it reads or writes files"},
      {{"pin_memory", "is_pinned", "_local_scalar_dense", "item", "nonzero", "masked_select",
        "unique"},
       "it pins host memory or waits on the device"},
      {{"stream", "event", "cuda", "device"}, "it works on devices, streams or events"},
      {{"set_", "storage", "resize", "from_blob", "data_ptr"},
       "it reaches a tensor's storage or memory"},
      {{"print", "profil", "record_function"}, "it prints or profiles"},
  };
  const absl::string_view op = absl::string_view(name.name).substr(std::string("aten::").size());
  for (const Family& family : *kFamilies) {
    for (absl::string_view fragment : family.fragments) {
      if (absl::StrContains(op, fragment)) return std::string(family.why);
    }
  }
  return "it is not one of the reviewed operators that compute on tensors alone";
}

}  // namespace

bool IsAllowedOperator(const c10::OperatorName& name) {
  static const auto* const kAllowed = [] {
    auto* allowed = new absl::flat_hash_set<std::string>();
    for (const AllowedOperatorGroup& group : AllowedOperatorGroups()) {
      for (absl::string_view op : group.operators) allowed->insert(std::string(op));
    }
    return allowed;
  }();
  const std::string overload =
      name.overload_name.empty() ? name.name : absl::StrCat(name.name, ".", name.overload_name);
  return kAllowed->contains(name.name) || kAllowed->contains(overload);
}

absl::Status CheckAllowedOperator(const GraphNode& node, const c10::OperatorName& name) {
  if (!IsAllowedOperator(name)) {
    return node.Refuse(absl::StrCat(name.name,
                                    " is not among the operators Stoker runs: ", WhyRefused(name),
                                    " (the operators Stoker runs are listed in "
                                    "trainer/graph/operator_allowlist.cc)"));
  }
  auto pin_memory = node.inputs.find("pin_memory");
  if (pin_memory != node.inputs.end() && pin_memory->second->is_object() &&
      pin_memory->second->value("as_bool", false)) {
    return node.Refuse(absl::StrCat(name.name,
                                    " with pin_memory=True: Stoker's programs do not pin host "
                                    "memory"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
