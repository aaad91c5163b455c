// A node's serialised arguments and outputs turned into a GraphCall's: arguments in the
// order of the operator's schema (from the node, else the schema's default), each a
// constant converted once at load or a slot of the program's value table (BufferPlan);
// outputs as the slots their values go to.
//
// Note [Argument converters]
// Each kind of serialised argument ("as_tensor", "as_ints", "as_scalar_type", ...) has one
// converter in a table; a kind without one is refused by name. A number ("as_int",
// "as_float", "as_bool") takes the form of the schema type it is passed as: a wrapped-number
// tensor for a Tensor (Python's `x.add_(1)`), a double for a float, a one-element list for
// an int[] (int[2] given as one int), and its own type otherwise. Generator arguments are
// the run's generator; device arguments the run's device (Note [Devices of a program]).
#ifndef STOKER_TRAINER_GRAPH_GRAPH_ARGUMENTS_H_
#define STOKER_TRAINER_GRAPH_GRAPH_ARGUMENTS_H_

#include <ATen/core/function_schema.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/buffer_plan.h"
#include "trainer/graph/graph_call.h"
#include "trainer/graph/graph_node.h"

namespace stoker::trainer {

// `node`'s arguments for `schema`, in its order. InvalidArgument naming the node and the
// argument for one missing without a default, of a kind without a converter, or of a
// value its converter refuses (an unknown dtype, a malformed symbolic int, ...).
absl::StatusOr<std::vector<GraphArg>> ConvertArguments(const GraphNode& node,
                                                       const c10::FunctionSchema& schema,
                                                       BufferPlan& plan);

// One argument of `schema`: what ConvertArguments does for `formal`.
absl::StatusOr<GraphArg> ConvertArgument(const GraphNode& node, const c10::Argument& formal,
                                         BufferPlan& plan);

// An integer argument: a constant ("as_int", or "as_sym_int" holding "as_int") or the slot
// of a symbolic size ("as_sym_int" holding "as_name"). False for anything else.
bool ConvertSymInt(const nlohmann::json& argument, BufferPlan& plan, GraphArg* arg);

// The slot a serialised Output goes to: a tensor's or a symbolic int's; -1 for other
// outputs (constants, none).
int OutputSlot(const nlohmann::json& output, BufferPlan& plan);

// Sets `call`'s outputs from `node`'s, one per return of `schema` (a Tensor[] return is a
// list of slots). InvalidArgument naming the node when the counts differ.
absl::Status ConvertReturns(const GraphNode& node, const c10::FunctionSchema& schema,
                            BufferPlan& plan, GraphCall* call);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_ARGUMENTS_H_
