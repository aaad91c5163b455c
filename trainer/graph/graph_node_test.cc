// Tests of reading one serialised node: its name, target, arguments by name and outputs,
// and the refusal of a node that takes a subgraph.
#include "trainer/graph/graph_node.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {
namespace {

using nlohmann::json;

TEST(ArgumentKindTest, IsTheOneKeyOfAnObject) {
  EXPECT_EQ(ArgumentKind(json::parse(R"({"as_tensor": {"name": "x"}})")), "as_tensor");
  EXPECT_EQ(ArgumentKind(json::parse(R"({"as_none": true})")), "as_none");
  EXPECT_EQ(ArgumentKind(json::object()), "");
  EXPECT_EQ(ArgumentKind(json::parse("3")), "");
}

TEST(ReadGraphNodeTest, ReadsNameTargetInputsAndOutputs) {
  const json node = json::parse(R"({
    "target": "torch.ops.aten.relu.default", "name": "relu_1",
    "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "conv2d"}}}],
    "outputs": [{"as_tensor": {"name": "relu_1"}}]})");
  absl::StatusOr<GraphNode> read = ReadGraphNode(node, "m.pt2");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->name, "relu_1");
  EXPECT_EQ(read->target, "torch.ops.aten.relu.default");
  EXPECT_EQ(read->where, "m.pt2: node relu_1 (torch.ops.aten.relu.default)");
  ASSERT_EQ(read->inputs.count("self"), 1u);
  EXPECT_EQ((*read->inputs.at("self"))["as_tensor"]["name"], "conv2d");
  ASSERT_EQ(read->outputs.size(), 1u);
  EXPECT_EQ(read->outputs[0]["as_tensor"]["name"], "relu_1");
}

TEST(ReadGraphNodeTest, NameDefaultsToTheTargetAndListsToEmpty) {
  absl::StatusOr<GraphNode> read =
      ReadGraphNode(json::parse(R"({"target": "torch.ops.aten.zeros.default"})"), "m.pt2");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->name, "torch.ops.aten.zeros.default");
  EXPECT_TRUE(read->inputs.empty());
  EXPECT_TRUE(read->outputs.empty());
}

TEST(ReadGraphNodeTest, SubgraphArgumentIsRefusedByNodeAndOp) {
  const json node = json::parse(R"({
    "target": "torch.ops.higher_order.cond", "name": "cond",
    "inputs": [{"name": "true_fn", "arg": {"as_graph": {"name": "true_graph_0"}}}]})");
  absl::StatusOr<GraphNode> read = ReadGraphNode(node, "m.pt2");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read.status().message().find(
                "m.pt2: node cond (torch.ops.higher_order.cond): takes a subgraph"),
            0u)
      << read.status();
}

TEST(GraphNodeTest, RefusalNamesTheNodeAndItsTarget) {
  GraphNode node;
  node.where = "m.pt2: node add (torch.ops.aten.add.Tensor)";
  absl::Status refused = node.Refuse("a reason");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), "m.pt2: node add (torch.ops.aten.add.Tensor): a reason");
}

}  // namespace
}  // namespace stoker::trainer
