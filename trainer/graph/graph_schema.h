// What a node's target names, resolved against this libtorch: an ATen operator and its
// schema (c10::Dispatcher), a size query, or integer arithmetic on sizes; and the checks of
// a node against its operator's schema. Everything else (custom and library operators,
// higher-order operators, operators this libtorch lacks, ATen operators outside
// operator_allowlist.h) is refused, naming the node and its operator.
#ifndef STOKER_TRAINER_GRAPH_GRAPH_SCHEMA_H_
#define STOKER_TRAINER_GRAPH_GRAPH_SCHEMA_H_

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/graph/graph_call.h"
#include "trainer/graph/graph_node.h"

namespace stoker::trainer {

struct NodeOperator {
  enum class Kind {
    kAten,      // an ATen operator, through the dispatcher
    kSymSize,   // aten::sym_size, sym_numel or sym_stride
    kSymArith,  // Python's _operator on sizes
  };
  Kind kind = Kind::kAten;
  c10::OperatorName name{"", ""};             // kAten, kSymSize: "aten::add_", "Tensor"
  std::optional<c10::OperatorHandle> handle;  // kAten
  std::string sym_op;  // kSymSize: "size", "numel", "stride"; kSymArith: "mul", "add", ...
};

// "torch.ops.aten.add_.Tensor" -> {"aten::add_", "Tensor"}; overload "default" is "".
// `target` starts with "torch.ops.aten.".
c10::OperatorName AtenName(absl::string_view target);

// Resolves `node`'s target. InvalidArgument "<where>: node <name> (<target>): <why>" for a
// higher-order operator, a Python operator other than mul, add, sub, floordiv and mod on
// two operands with one result, a target outside torch.ops.aten, a size query without a
// tensor `self` or one result, an ATen operator this libtorch lacks, and one outside
// the operators Stoker runs (operator_allowlist.h).
absl::StatusOr<NodeOperator> ResolveOperator(const GraphNode& node);

// InvalidArgument naming the node when it passes an argument `schema` does not have.
absl::Status CheckArgumentNames(const GraphNode& node, const c10::FunctionSchema& schema);

// InvalidArgument naming the node when `op` draws random numbers without a generator
// argument (other than dropout, which a program runs with its own generator, and
// attention without dropout). `args` are the node's converted arguments, in schema order.
absl::Status CheckSeeded(const GraphNode& node, const NodeOperator& op,
                         const std::vector<GraphArg>& args);

// Whether `op` is aten::dropout or aten::dropout_.
bool IsDropout(const NodeOperator& op);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_SCHEMA_H_
