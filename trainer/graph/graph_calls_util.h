// Small queries on a program's calls that the rewrites (graph_fusion.cc, graph_fp8.cc,
// pointwise_region.cc) share.
#ifndef STOKER_TRAINER_GRAPH_GRAPH_CALLS_UTIL_H_
#define STOKER_TRAINER_GRAPH_GRAPH_CALLS_UTIL_H_

#include <vector>

#include "trainer/graph/graph_call.h"

namespace stoker::trainer {

// Whether `call` is the operator `name` ("aten::linear") with the overload `overload`.
inline bool IsOp(const GraphCall& call, const char* name, const char* overload = "") {
  if (call.kind != GraphCall::Kind::kOperator || !call.op.has_value()) return false;
  const c10::OperatorName& op = call.op->operator_name();
  return op.name == name && op.overload_name == overload;
}

// Whether `arg` is one slot of the value table.
inline bool IsSlot(const GraphArg& arg) {
  return arg.kind == GraphArg::Kind::kSlot && arg.slot >= 0;
}

// The slots `call` reads.
inline std::vector<int> Reads(const GraphCall& call) {
  std::vector<int> slots;
  for (const GraphArg& arg : call.args) {
    if (IsSlot(arg)) slots.push_back(arg.slot);
    for (int s : arg.slots) {
      if (s >= 0) slots.push_back(s);
    }
  }
  if (call.residual_slot >= 0) slots.push_back(call.residual_slot);
  return slots;
}

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_CALLS_UTIL_H_
