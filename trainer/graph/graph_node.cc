#include "trainer/graph/graph_node.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

using nlohmann::json;

namespace {

// json[key], or an empty array when `json` has no such key; a reference into `json`.
const json& ListField(const json& object, const char* key) {
  static const json* const kEmpty = new json(json::array());
  return object.is_object() && object.contains(key) ? object[key] : *kEmpty;
}

}  // namespace

const json& Field(const json& object, const char* key) {
  static const json* const kNull = new json();
  if (!object.is_object()) return *kNull;
  auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

std::string ArgumentKind(const json& argument) {
  if (!argument.is_object() || argument.empty()) return "";
  return argument.begin().key();
}

absl::Status GraphNode::Refuse(absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", why));
}

absl::StatusOr<GraphNode> ReadGraphNode(const json& node, absl::string_view where) {
  GraphNode read;
  read.target = node.value("target", "");
  read.name = node.value("name", read.target);
  read.where = absl::StrCat(where, ": node ", read.name, " (", read.target, ")");
  for (const json& input : ListField(node, "inputs")) {
    if (!Field(input, "arg").is_object()) return read.Refuse("an input without its argument");
    if (ArgumentKind(Field(input, "arg")) == "as_graph") {
      return read.Refuse(
          "takes a subgraph: data-dependent control flow or a higher-order operator, which "
          "Stoker does not run; "
          "express the branch with tensor ops (torch.where) or make it static");
    }
    read.inputs[input.value("name", "")] = &Field(input, "arg");
  }
  read.outputs = node.value("outputs", json::array());
  return read;
}

}  // namespace stoker::trainer
