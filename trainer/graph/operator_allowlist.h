// The ATen operators a Stoker program may call: one reviewed table of operators that
// compute on tensors alone (Note [Operator allowlist]), and the refusal, naming the node,
// the operator and why, of every other operator.
#ifndef STOKER_TRAINER_GRAPH_OPERATOR_ALLOWLIST_H_
#define STOKER_TRAINER_GRAPH_OPERATOR_ALLOWLIST_H_

#include <ATen/core/operator_name.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/graph/graph_node.h"

namespace stoker::trainer {

// One group of the table: why its operators are safe to run, and the operators, sorted,
// each "aten::name" (every overload) or "aten::name.overload".
struct AllowedOperatorGroup {
  absl::string_view why;  // "pointwise math"
  std::vector<absl::string_view> operators;
};

// The table, in the order it reads in operator_allowlist.cc.
const std::vector<AllowedOperatorGroup>& AllowedOperatorGroups();

// Whether the table holds `name` (by its name alone or by name and overload).
bool IsAllowedOperator(const c10::OperatorName& name);

// InvalidArgument "<where>: node <name> (<target>): aten::from_file is not among the
// operators Stoker runs: it reads or writes files; ..." when `name` is outside the table,
// or when the node asks for pinned host memory (pin_memory=True).
absl::Status CheckAllowedOperator(const GraphNode& node, const c10::OperatorName& name);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_OPERATOR_ALLOWLIST_H_
