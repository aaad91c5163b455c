#include "trainer/graph/pointwise_region.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/graph/graph_calls_util.h"

namespace stoker::trainer {
namespace {

// A region grows no larger than this: the kernels' parameter lists and registers stay small.
constexpr int kMaxRegionInputs = 12;
constexpr int kMaxRegionCalls = 32;

// A number given for a Tensor or Scalar formal: a double, an int, a Scalar or a wrapped
// number (a Python float the exporter passed where the schema takes a Tensor).
bool ScalarOf(const GraphArg& arg, double* value) {
  if (arg.kind != GraphArg::Kind::kConstant) return false;
  const c10::IValue& v = arg.constant;
  if (v.isDouble() || v.isInt()) {
    *value = v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
    return true;
  }
  if (v.isScalar()) {
    *value = v.toScalar().toDouble();
    return true;
  }
  if (v.isTensor() && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number() &&
      v.toTensor().is_floating_point()) {
    *value = v.toTensor().item<double>();
    return true;
  }
  return false;
}

bool IsNone(const GraphArg& arg) {
  return arg.kind == GraphArg::Kind::kConstant && arg.constant.isNone();
}

bool IsFalseOrNone(const GraphArg& arg) {
  return arg.kind == GraphArg::Kind::kConstant &&
         (arg.constant.isNone() || (arg.constant.isBool() && !arg.constant.toBool()));
}

// What an elementwise call computes: the op, its tensor operands (slots) and scalars.
struct Elementwise {
  PointwiseOp op = PointwiseOp::kInput;
  std::vector<int> operand_slots;  // self first
  bool has_scalar = false;
  double scalar = 0, scalar2 = 0;
  bool has_min = false, has_max = false;
  double alpha = 1;  // add/sub: the factor of `other`
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool in_place = false;
};

const std::map<std::string, PointwiseOp>& BinaryOps() {
  static const auto* const kOps =
      new std::map<std::string, PointwiseOp>{{"aten::add", PointwiseOp::kAdd},
                                             {"aten::sub", PointwiseOp::kSub},
                                             {"aten::mul", PointwiseOp::kMul},
                                             {"aten::div", PointwiseOp::kDiv}};
  return *kOps;
}

const std::map<std::string, PointwiseOp>& UnaryOps() {
  static const auto* const kOps = new std::map<std::string, PointwiseOp>{
      {"aten::neg", PointwiseOp::kNeg},         {"aten::relu", PointwiseOp::kRelu},
      {"aten::silu", PointwiseOp::kSilu},       {"aten::sigmoid", PointwiseOp::kSigmoid},
      {"aten::tanh", PointwiseOp::kTanh},       {"aten::exp", PointwiseOp::kExp},
      {"aten::rsqrt", PointwiseOp::kRsqrt},     {"aten::sqrt", PointwiseOp::kSqrt},
      {"aten::gelu", PointwiseOp::kGelu},       {"aten::pow", PointwiseOp::kPow},
      {"aten::clamp", PointwiseOp::kClamp},     {"aten::clamp_min", PointwiseOp::kClamp},
      {"aten::clamp_max", PointwiseOp::kClamp}, {"aten::_to_copy", PointwiseOp::kCast},
      {"aten::to", PointwiseOp::kCast}};
  return *kOps;
}

// Reads `call` as an elementwise op the kernels generate, or returns false.
bool ReadElementwise(const GraphCall& call, Elementwise* out) {
  if (call.kind != GraphCall::Kind::kOperator || !call.op.has_value()) return false;
  if (call.outputs.size() != 1 || call.outputs[0].size() != 1 || call.outputs[0][0] < 0)
    return false;
  const c10::OperatorName& name = call.op->operator_name();
  std::string base = name.name;
  const bool in_place = base.size() > 1 && base.back() == '_' && base != "aten::_to_copy";
  if (in_place) base.pop_back();
  const std::string& overload = name.overload_name;
  const std::vector<GraphArg>& args = call.args;
  if (args.empty() || !IsSlot(args[0])) return false;
  Elementwise e;
  e.in_place = in_place;
  e.operand_slots.push_back(args[0].slot);
  auto binary = BinaryOps().find(base);
  if (binary != BinaryOps().end()) {
    if (overload != "Tensor" && overload != "Scalar") return false;
    e.op = binary->second;
    const bool with_alpha = e.op == PointwiseOp::kAdd || e.op == PointwiseOp::kSub;
    if (args.size() != (with_alpha ? 3u : 2u)) return false;
    if (with_alpha && !ScalarOf(args[2], &e.alpha)) return false;
    if (IsSlot(args[1])) {
      e.operand_slots.push_back(args[1].slot);
    } else if (ScalarOf(args[1], &e.scalar)) {
      e.has_scalar = true;
      e.scalar *= e.alpha;
      e.alpha = 1;
    } else {
      return false;
    }
    *out = std::move(e);
    return true;
  }
  auto unary = UnaryOps().find(base);
  if (unary == UnaryOps().end()) return false;
  e.op = unary->second;
  if (e.op == PointwiseOp::kGelu) {
    if (args.size() != 2 || args[1].kind != GraphArg::Kind::kConstant ||
        !args[1].constant.isString())
      return false;
    const std::string approximate = args[1].constant.toStringRef();
    if (approximate == "tanh") {
      e.op = PointwiseOp::kGeluTanh;
    } else if (approximate != "none") {
      return false;
    }
  } else if (e.op == PointwiseOp::kPow) {
    if (overload != "Tensor_Scalar" || args.size() != 2 || !ScalarOf(args[1], &e.scalar))
      return false;
    e.has_scalar = true;
  } else if (e.op == PointwiseOp::kClamp) {
    if (base == "aten::clamp") {
      if (!overload.empty() || args.size() != 3) return false;
      e.has_min = !IsNone(args[1]);
      e.has_max = !IsNone(args[2]);
      if ((e.has_min && !ScalarOf(args[1], &e.scalar)) ||
          (e.has_max && !ScalarOf(args[2], &e.scalar2)))
        return false;
    } else {
      if (!overload.empty() || args.size() != 2) return false;
      const bool min = base == "aten::clamp_min";
      (min ? e.has_min : e.has_max) = true;
      if (!ScalarOf(args[1], min ? &e.scalar : &e.scalar2)) return false;
    }
  } else if (e.op == PointwiseOp::kCast) {
    if (in_place) return false;
    // _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format) and
    // to.dtype(self, dtype, non_blocking, copy, memory_format): a dtype change only.
    const bool to_copy = base == "aten::_to_copy";
    if (to_copy ? (!overload.empty() || args.size() != 7)
                : (overload != "dtype" || args.size() != 5))
      return false;
    const GraphArg& dtype = args[1];
    if (dtype.kind != GraphArg::Kind::kConstant || !dtype.constant.isInt()) return false;
    e.dtype = static_cast<c10::ScalarType>(dtype.constant.toInt());
    for (size_t i = 2; i < args.size(); ++i) {
      if (!IsFalseOrNone(args[i])) return false;
    }
  } else if (args.size() != 1 || !overload.empty()) {
    return false;
  }
  *out = std::move(e);
  return true;
}

// Whether the value a call returns may share storage with one of its arguments.
bool ReturnsAlias(const GraphCall& call) {
  switch (call.kind) {
    case GraphCall::Kind::kOperator: {
      if (!call.op.has_value()) return true;
      for (const c10::Argument& r : call.op->schema().returns()) {
        if (r.alias_info() != nullptr) return true;
      }
      return false;
    }
    case GraphCall::Kind::kSymSize:
    case GraphCall::Kind::kSymArith:
    case GraphCall::Kind::kBatchNorm:
    case GraphCall::Kind::kMaxPool:
    case GraphCall::Kind::kSelfAttention:
    case GraphCall::Kind::kPointwise:
      return false;
    default:
      return true;
  }
}

// The slot an in-place operator writes (its first argument), else -1.
int InPlaceTarget(const GraphCall& call) {
  if (call.kind != GraphCall::Kind::kOperator || !call.op.has_value()) return -1;
  const std::vector<c10::Argument>& formals = call.op->schema().arguments();
  if (formals.empty() || call.args.empty() || !IsSlot(call.args[0])) return -1;
  const c10::AliasInfo* alias = formals[0].alias_info();
  return alias != nullptr && alias->isWrite() ? call.args[0].slot : -1;
}

// Whether `call` may write `slot` in place.
bool Writes(const GraphCall& call, int slot) {
  if (call.kind == GraphCall::Kind::kOperator && call.op.has_value()) {
    const std::vector<c10::Argument>& formals = call.op->schema().arguments();
    for (size_t i = 0; i < formals.size() && i < call.args.size(); ++i) {
      const c10::AliasInfo* alias = formals[i].alias_info();
      if (alias != nullptr && alias->isWrite() && IsSlot(call.args[i]) && call.args[i].slot == slot)
        return true;
    }
    return false;
  }
  if (call.kind == GraphCall::Kind::kDropout) return call.in_place && call.args[0].slot == slot;
  if (call.kind == GraphCall::Kind::kBatchNorm) {
    return (call.args.size() > 4 && (call.args[3].slot == slot || call.args[4].slot == slot)) ||
           (call.in_place && call.args[0].slot == slot);
  }
  return false;
}

class RegionFinder {
 public:
  RegionFinder(const std::vector<std::unique_ptr<GraphCall>>& calls,
               const std::vector<int>& outside_reads)
      : calls_(calls), outside_(outside_reads.begin(), outside_reads.end()) {
    for (size_t i = 0; i < calls.size(); ++i) {
      for (int s : Reads(*calls[i])) readers_[s].push_back(static_cast<int>(i));
      for (const std::vector<int>& slots : calls[i]->outputs) {
        for (int s : slots) {
          if (s >= 0) producer_[s] = static_cast<int>(i);
        }
      }
    }
  }

  // Note [Pointwise regions]: whether the in-place call `at` may write a fresh tensor
  // instead of `slot`.
  bool Owned(int slot, int at, int skip_reader) const {
    if (outside_.count(slot) > 0) return false;
    auto producer = producer_.find(slot);
    if (producer == producer_.end()) return false;  // an input, parameter or buffer
    auto readers = readers_.find(slot);
    if (readers != readers_.end()) {
      for (int r : readers->second) {
        if (r == at || r == skip_reader) continue;
        if (r > at || ReturnsAlias(*calls_[r])) return false;
      }
    }
    const GraphCall& made = *calls_[producer->second];
    if (!ReturnsAlias(made)) return true;
    const int target = InPlaceTarget(made);
    return target >= 0 && Owned(target, at, producer->second);
  }

  std::vector<std::vector<int>> Regions() const {
    std::vector<int> region_of(calls_.size(), -1);
    std::vector<std::vector<int>> regions;
    for (size_t j = 0; j < calls_.size(); ++j) {
      Elementwise e;
      if (!ReadElementwise(*calls_[j], &e)) continue;
      if (e.in_place && !Owned(e.operand_slots[0], static_cast<int>(j), -1)) continue;
      std::vector<int> members = {static_cast<int>(j)};
      std::set<int> merged_regions;
      for (int s : e.operand_slots) {
        auto producer = producer_.find(s);
        if (producer == producer_.end()) continue;
        const int r = region_of[producer->second];
        if (r < 0 || merged_regions.count(r) > 0) continue;
        std::vector<int> candidate = members;
        candidate.insert(candidate.end(), regions[r].begin(), regions[r].end());
        std::sort(candidate.begin(), candidate.end());
        if (!Valid(candidate)) continue;
        members = std::move(candidate);
        merged_regions.insert(r);
      }
      for (int r : merged_regions) regions[r].clear();
      const int id = static_cast<int>(regions.size());
      for (int m : members) region_of[m] = id;
      regions.push_back(std::move(members));
    }
    std::vector<std::vector<int>> kept;
    for (auto& r : regions) {
      if (r.size() >= 2) kept.push_back(std::move(r));
    }
    return kept;
  }

  // The slots the sorted `members` read that none of them computes.
  std::vector<int> Inputs(const std::vector<int>& members) const {
    std::set<int> computed;
    std::vector<int> inputs;
    for (int m : members) {
      for (int s : Reads(*calls_[m])) {
        if (computed.count(s) == 0 && std::find(inputs.begin(), inputs.end(), s) == inputs.end())
          inputs.push_back(s);
      }
      computed.insert(calls_[m]->outputs[0][0]);
    }
    return inputs;
  }

  // Whether a member's value is read by a call outside `members` or outside the calls.
  bool LiveOut(int slot, const std::vector<int>& members) const {
    if (outside_.count(slot) > 0) return true;
    auto readers = readers_.find(slot);
    if (readers == readers_.end()) return false;
    for (int r : readers->second) {
      if (!std::binary_search(members.begin(), members.end(), r)) return true;
    }
    return false;
  }

 private:
  // Whether the sorted `members` can run as one call in the place of the last: nothing
  // outside reads their values before it, nothing between writes their inputs, and the region
  // stays within the kernels' limits.
  bool Valid(const std::vector<int>& members) const {
    if (static_cast<int>(members.size()) > kMaxRegionCalls) return false;
    const int last = members.back();
    for (int m : members) {
      auto readers = readers_.find(calls_[m]->outputs[0][0]);
      if (readers == readers_.end()) continue;
      for (int r : readers->second) {
        if (r < last && !std::binary_search(members.begin(), members.end(), r)) return false;
      }
    }
    const std::vector<int> inputs = Inputs(members);
    if (static_cast<int>(inputs.size()) > kMaxRegionInputs) return false;
    for (int k = members.front() + 1; k < last; ++k) {
      if (std::binary_search(members.begin(), members.end(), k)) continue;
      for (int s : inputs) {
        if (Writes(*calls_[k], s)) return false;
      }
    }
    return true;
  }

  const std::vector<std::unique_ptr<GraphCall>>& calls_;
  std::set<int> outside_;
  std::unordered_map<int, std::vector<int>> readers_;  // in program order
  std::unordered_map<int, int> producer_;
};

// The region of the sorted `members`, their calls moved into its composition.
std::unique_ptr<GraphCall> BuildRegion(const RegionFinder& finder, const std::vector<int>& members,
                                       std::vector<std::unique_ptr<GraphCall>>& calls) {
  auto region = std::make_shared<PointwiseRegion>();
  region->input_slots = finder.Inputs(members);
  std::unordered_map<int, int> node_of;  // slot -> node
  for (size_t i = 0; i < region->input_slots.size(); ++i) {
    PointwiseNode input;
    input.input = static_cast<int>(i);
    node_of[region->input_slots[i]] = static_cast<int>(region->nodes.size());
    region->nodes.push_back(input);
  }
  auto call = std::make_unique<GraphCall>();
  call->kind = GraphCall::Kind::kPointwise;
  for (int m : members) {
    Elementwise e;
    ReadElementwise(*calls[m], &e);
    PointwiseNode node;
    for (int s : e.operand_slots) node.operands.push_back(node_of.at(s));
    if (node.operands.size() == 2 && e.alpha != 1) {
      PointwiseNode scaled;
      scaled.op = PointwiseOp::kMul;
      scaled.operands = {node.operands[1]};
      scaled.has_scalar = true;
      scaled.scalar = e.alpha;
      node.operands[1] = static_cast<int>(region->nodes.size());
      region->nodes.push_back(scaled);
    }
    node.op = e.op;
    node.has_scalar = e.has_scalar;
    node.scalar = e.scalar;
    node.scalar2 = e.scalar2;
    node.has_min = e.has_min;
    node.has_max = e.has_max;
    node.dtype = e.dtype;
    node.keeps_first_dtype = e.in_place;
    const int slot = calls[m]->outputs[0][0];
    node_of[slot] = static_cast<int>(region->nodes.size());
    region->nodes.push_back(node);
    if (finder.LiveOut(slot, members)) {
      region->output_nodes.push_back(node_of[slot]);
      call->outputs.push_back({slot});
      call->list_output.push_back(false);
    }
  }
  if (region->output_nodes.empty()) return nullptr;
  for (int s : region->input_slots) call->args.push_back(GraphArg::OfSlot(s));
  const std::string last_where = calls[members.back()]->where;
  region->where = absl::StrCat("pointwise region of ", members.size(), " calls ending at ",
                               last_where.empty() ? "a fused call" : last_where);
  call->where = last_where;
  for (int m : members) region->composition.push_back(std::move(calls[m]));
  call->pointwise = std::move(region);
  return call;
}

const char* OpName(PointwiseOp op) {
  switch (op) {
    case PointwiseOp::kInput:
      return "in";
    case PointwiseOp::kAdd:
      return "add";
    case PointwiseOp::kSub:
      return "sub";
    case PointwiseOp::kMul:
      return "mul";
    case PointwiseOp::kDiv:
      return "div";
    case PointwiseOp::kNeg:
      return "neg";
    case PointwiseOp::kRelu:
      return "relu";
    case PointwiseOp::kGelu:
      return "gelu";
    case PointwiseOp::kGeluTanh:
      return "gelu_tanh";
    case PointwiseOp::kSilu:
      return "silu";
    case PointwiseOp::kSigmoid:
      return "sigmoid";
    case PointwiseOp::kTanh:
      return "tanh";
    case PointwiseOp::kExp:
      return "exp";
    case PointwiseOp::kRsqrt:
      return "rsqrt";
    case PointwiseOp::kSqrt:
      return "sqrt";
    case PointwiseOp::kPow:
      return "pow";
    case PointwiseOp::kClamp:
      return "clamp";
    case PointwiseOp::kCast:
      return "cast";
  }
  return "?";
}

std::string DescribeNode(const PointwiseRegion& region, int n) {
  const PointwiseNode& node = region.nodes[n];
  if (node.op == PointwiseOp::kInput) return absl::StrCat("in", node.input);
  std::string text = absl::StrCat(OpName(node.op), node.keeps_first_dtype ? "_" : "", "(");
  for (size_t i = 0; i < node.operands.size(); ++i)
    absl::StrAppend(&text, i > 0 ? ", " : "", DescribeNode(region, node.operands[i]));
  if (node.has_scalar) absl::StrAppend(&text, ", ", node.scalar);
  if (node.op == PointwiseOp::kCast) absl::StrAppend(&text, ", ", c10::toString(node.dtype));
  return text + ")";
}

}  // namespace

std::string PointwiseRegion::Describe() const {
  std::string text;
  for (size_t i = 0; i < output_nodes.size(); ++i)
    absl::StrAppend(&text, i > 0 ? "; " : "", DescribeNode(*this, output_nodes[i]));
  return text;
}

PointwiseRegionCounts FindPointwiseRegions(std::vector<std::unique_ptr<GraphCall>>& calls,
                                           const std::vector<int>& outside_reads) {
  PointwiseRegionCounts counts;
  std::vector<bool> removed(calls.size(), false);
  {
    const RegionFinder finder(calls, outside_reads);
    // Regions are disjoint and building one reads only its own members' calls, so each can
    // be moved out while the others are still to be built.
    const std::vector<std::vector<int>> regions = finder.Regions();
    for (const std::vector<int>& members : regions) {
      std::unique_ptr<GraphCall> call = BuildRegion(finder, members, calls);
      if (call == nullptr) continue;
      counts.regions += 1;
      counts.ops += call->pointwise->op_count();
      for (int m : members) removed[m] = true;
      removed[members.back()] = false;
      calls[members.back()] = std::move(call);
    }
  }
  std::vector<std::unique_ptr<GraphCall>> kept;
  kept.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(calls[i]));
  }
  calls = std::move(kept);
  return counts;
}

void RunPointwiseComposition(const PointwiseRegion& region, GraphFrame& frame) {
  for (const auto& call : region.composition) RunCall(*call, frame);
}

}  // namespace stoker::trainer
