// One node of a torch.export graph as the stages of GraphProgram::Build read it: its name,
// its target, its arguments by name and its outputs, and the wording of a refusal that
// names it.
#ifndef STOKER_TRAINER_GRAPH_GRAPH_NODE_H_
#define STOKER_TRAINER_GRAPH_GRAPH_NODE_H_

#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {

// object[key] when `object` is an object that has `key`, else null: a read of a field that
// a malformed file may lack (a const json's operator[] asserts the key is there).
const nlohmann::json& Field(const nlohmann::json& object, const char* key);

// The kind of a serialised Argument, Output or spec: its one key ("as_tensor", "as_ints",
// "parameter", ...); "" for anything that is not an object with a key.
std::string ArgumentKind(const nlohmann::json& argument);

// A serialised node, read. Refers into the json it was read from (`inputs`), which must
// outlive it.
struct GraphNode {
  std::string name;    // "conv2d"
  std::string target;  // "torch.ops.aten.conv2d.default"
  // "<where>: node <name> (<target>)": the start of every message about the node.
  std::string where;
  // The node's arguments by their schema name, each its serialised Argument.
  std::unordered_map<std::string, const nlohmann::json*> inputs;
  nlohmann::json outputs = nlohmann::json::array();  // the serialised Outputs, in order

  // InvalidArgument "<where>: node <name> (<target>): <why>".
  absl::Status Refuse(absl::string_view why) const;
};

// Reads `node` ("target", "name" (the target without one), "inputs", "outputs");
// `where` starts messages ("--model=m.pt2 (training program)"). InvalidArgument naming
// the node when an argument is a subgraph (control flow, higher-order operators).
absl::StatusOr<GraphNode> ReadGraphNode(const nlohmann::json& node, absl::string_view where);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_NODE_H_
