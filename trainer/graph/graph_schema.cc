#include "trainer/graph/graph_schema.h"

#include <ATen/core/enum_tag.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "trainer/graph/operator_allowlist.h"

namespace stoker::trainer {
namespace {

constexpr absl::string_view kAtenPrefix = "torch.ops.aten.";
constexpr absl::string_view kOperatorPrefix = "_operator.";

absl::StatusOr<NodeOperator> SymArithOperator(const GraphNode& node) {
  const std::string op(absl::string_view(node.target).substr(kOperatorPrefix.size()));
  static const std::set<std::string> kArith = {"mul", "add", "sub", "floordiv", "mod"};
  if (kArith.count(op) == 0 || !node.inputs.count("a") || !node.inputs.count("b") ||
      node.outputs.size() != 1) {
    return node.Refuse(
        absl::StrCat("Python operator ", op,
                     " on symbolic sizes is not one Stoker runs (mul, add, sub, floordiv, mod)"));
  }
  NodeOperator resolved;
  resolved.kind = NodeOperator::Kind::kSymArith;
  resolved.sym_op = op;
  return resolved;
}

absl::StatusOr<NodeOperator> SymSizeOperator(const GraphNode& node, c10::OperatorName name) {
  NodeOperator resolved;
  resolved.kind = NodeOperator::Kind::kSymSize;
  resolved.sym_op = name.name.substr(std::string("aten::sym_").size());
  resolved.name = std::move(name);
  auto self = node.inputs.find("self");
  if (self == node.inputs.end() || ArgumentKind(*self->second) != "as_tensor" ||
      node.outputs.size() != 1) {
    return node.Refuse("malformed size query");
  }
  return resolved;
}

}  // namespace

c10::OperatorName AtenName(absl::string_view target) {
  std::vector<std::string> parts = absl::StrSplit(target.substr(kAtenPrefix.size()), '.');
  std::string overload = parts.size() > 1 ? parts[1] : "";
  if (overload == "default") overload.clear();
  return c10::OperatorName(absl::StrCat("aten::", parts[0]), overload);
}

absl::StatusOr<NodeOperator> ResolveOperator(const GraphNode& node) {
  if (absl::StartsWith(node.target, "torch.ops.higher_order.")) {
    return node.Refuse(
        "a higher-order operator (control flow such as cond, while_loop or map, or a wrapped "
        "subgraph), "
        "which Stoker does not run");
  }
  if (absl::StartsWith(node.target, kOperatorPrefix)) return SymArithOperator(node);
  if (!absl::StartsWith(node.target, kAtenPrefix)) {
    return node.Refuse(
        "not an ATen operator (a custom or library op); Stoker runs graphs of torch.ops.aten "
        "operators only");
  }
  c10::OperatorName name = AtenName(node.target);
  if (name.name == "aten::sym_size" || name.name == "aten::sym_numel" ||
      name.name == "aten::sym_stride") {
    RETURN_IF_ERROR(CheckAllowedOperator(node, name));
    return SymSizeOperator(node, std::move(name));
  }
  NodeOperator resolved;
  resolved.handle = c10::Dispatcher::singleton().findSchema(name);
  if (!resolved.handle.has_value()) {
    return node.Refuse(
        "no such ATen operator in this libtorch (exported by another torch version?)");
  }
  RETURN_IF_ERROR(CheckAllowedOperator(node, name));
  resolved.name = std::move(name);
  return resolved;
}

absl::Status CheckArgumentNames(const GraphNode& node, const c10::FunctionSchema& schema) {
  for (const auto& [input, unused] : node.inputs) {
    if (!schema.argumentIndexWithName(input).has_value()) {
      return node.Refuse(absl::StrCat("argument '", input, "' is not in the operator's schema ",
                                      c10::toString(schema),
                                      " (exported by another torch version?)"));
    }
  }
  return absl::OkStatus();
}

bool IsDropout(const NodeOperator& op) {
  return op.name.name == "aten::dropout" || op.name.name == "aten::dropout_";
}

absl::Status CheckSeeded(const GraphNode& node, const NodeOperator& op,
                         const std::vector<GraphArg>& args) {
  const c10::FunctionSchema& schema = op.handle->schema();
  bool has_generator = false;
  for (const c10::Argument& a : schema.arguments()) {
    if (a.type()->kind() == c10::TypeKind::OptionalType &&
        a.type()->castRaw<c10::OptionalType>()->getElementType()->kind() ==
            c10::TypeKind::GeneratorType) {
      has_generator = true;
    }
  }
  const bool unseeded =
      op.handle->hasTag(at::Tag::nondeterministic_seeded) && !has_generator && !IsDropout(op);
  if (!unseeded) return absl::OkStatus();
  // Attention is random only through its dropout_p; with none it is deterministic.
  const std::optional<int> p = schema.argumentIndexWithName("dropout_p");
  const bool no_dropout = op.name.name == "aten::scaled_dot_product_attention" && p.has_value() &&
                          args[*p].kind == GraphArg::Kind::kConstant &&
                          args[*p].constant.isDouble() && args[*p].constant.toDouble() == 0.0;
  if (no_dropout) return absl::OkStatus();
  return node.Refuse(
      "a random operator without a generator argument: its draws could not be seeded per "
      "step, "
      "so resuming would not reproduce them");
}

}  // namespace stoker::trainer
