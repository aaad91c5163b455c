// Tests of resolving hand-written nodes' targets against this libtorch's operators: ATen
// operators and their overloads, size queries, arithmetic on sizes, and the refusal, by
// node and operator, of everything else; and the checks of a node against its schema.
#include "trainer/graph/graph_schema.h"

#include <deque>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/graph_node.h"

namespace stoker::trainer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A node `name` calling `target` on `inputs` (a json object: argument name -> Argument)
// with `outputs` outputs.
GraphNode Node(const std::string& name, const std::string& target, const json& inputs,
               int outputs = 1) {
  static auto* const kKeep = new std::deque<json>();  // the nodes GraphNodes refer to
  json node = {{"name", name}, {"target", target}, {"inputs", json::array()}};
  for (const auto& [input, arg] : inputs.items())
    node["inputs"].push_back({{"name", input}, {"arg", arg}});
  node["outputs"] = json::array();
  for (int i = 0; i < outputs; ++i)
    node["outputs"].push_back({{"as_tensor", {{"name", name + std::to_string(i)}}}});
  kKeep->push_back(node);
  absl::StatusOr<GraphNode> read = ReadGraphNode(kKeep->back(), "m.pt2");
  EXPECT_TRUE(read.ok()) << read.status();
  return *read;
}

json Tensor(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }

// The message of the refusal to resolve `node`.
std::string Refusal(const GraphNode& node) {
  absl::StatusOr<NodeOperator> op = ResolveOperator(node);
  EXPECT_FALSE(op.ok()) << node.target << " resolved";
  if (op.ok()) return "";
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(op.status().message());
}

TEST(AtenNameTest, SplitsNameAndOverload) {
  EXPECT_EQ(AtenName("torch.ops.aten.add_.Tensor"), c10::OperatorName("aten::add_", "Tensor"));
  EXPECT_EQ(AtenName("torch.ops.aten.relu.default"), c10::OperatorName("aten::relu", ""));
  EXPECT_EQ(AtenName("torch.ops.aten.relu"), c10::OperatorName("aten::relu", ""));
}

TEST(ResolveOperatorTest, AtenOperatorHasItsHandleAndSchema) {
  absl::StatusOr<NodeOperator> op =
      ResolveOperator(Node("add", "torch.ops.aten.add.Tensor", {{"self", Tensor("x")}}));
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->kind, NodeOperator::Kind::kAten);
  ASSERT_TRUE(op->handle.has_value());
  EXPECT_EQ(op->handle->schema().operator_name(), c10::OperatorName("aten::add", "Tensor"));
  EXPECT_EQ(op->name, c10::OperatorName("aten::add", "Tensor"));
}

TEST(ResolveOperatorTest, SizeQueriesAreSymSizeCalls) {
  for (const char* query : {"size", "numel", "stride"}) {
    absl::StatusOr<NodeOperator> op = ResolveOperator(
        Node("s", absl::StrCat("torch.ops.aten.sym_", query, ".int"), {{"self", Tensor("x")}}));
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ(op->kind, NodeOperator::Kind::kSymSize);
    EXPECT_EQ(op->sym_op, query);
    EXPECT_FALSE(op->handle.has_value());
  }
  EXPECT_EQ(Refusal(Node("s", "torch.ops.aten.sym_size.int", {{"self", {{"as_int", 1}}}})),
            "m.pt2: node s (torch.ops.aten.sym_size.int): malformed size query");
}

TEST(ResolveOperatorTest, ArithmeticOnSizesIsSymArith) {
  const json operands = {{"a", {{"as_int", 2}}}, {"b", {{"as_int", 3}}}};
  absl::StatusOr<NodeOperator> op = ResolveOperator(Node("mul", "_operator.mul", operands));
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->kind, NodeOperator::Kind::kSymArith);
  EXPECT_EQ(op->sym_op, "mul");
  const std::string refused =
      "m.pt2: node truediv (_operator.truediv): Python operator truediv on symbolic sizes is not "
      "one Stoker runs (mul, add, sub, floordiv, mod)";
  EXPECT_EQ(Refusal(Node("truediv", "_operator.truediv", operands)), refused);
  EXPECT_THAT(Refusal(Node("add", "_operator.add", {{"a", {{"as_int", 2}}}})),
              HasSubstr("Python operator add on symbolic sizes is not one Stoker runs"));
}

TEST(ResolveOperatorTest, CustomOperatorIsRefusedByNodeAndOp) {
  EXPECT_EQ(Refusal(Node("twice", "torch.ops.stoker_test.twice.default", {})),
            "m.pt2: node twice (torch.ops.stoker_test.twice.default): not an ATen operator (a "
            "custom or library op); Stoker runs graphs of torch.ops.aten operators only");
}

TEST(ResolveOperatorTest, HigherOrderOperatorIsRefused) {
  EXPECT_THAT(Refusal(Node("wrap", "torch.ops.higher_order.wrap_with_set_grad_enabled", {})),
              HasSubstr("node wrap (torch.ops.higher_order.wrap_with_set_grad_enabled): a "
                        "higher-order operator (control flow"));
}

TEST(ResolveOperatorTest, OperatorThisLibtorchLacksIsRefused) {
  EXPECT_EQ(Refusal(Node("n", "torch.ops.aten.no_such_operator.default", {})),
            "m.pt2: node n (torch.ops.aten.no_such_operator.default): no such ATen operator in "
            "this libtorch (exported by another torch version?)");
}

TEST(ResolveOperatorTest, OperatorOutsideTheAllowlistIsRefused) {
  EXPECT_THAT(Refusal(Node("mapped", "torch.ops.aten.from_file.default",
                           {{"filename", {{"as_string", "/tmp/f"}}}})),
              HasSubstr("m.pt2: node mapped (torch.ops.aten.from_file.default): aten::from_file "
                        "is not among the operators Stoker runs: it reads or writes files"));
  EXPECT_THAT(Refusal(Node("sizes", "torch.ops.aten.sym_size.default", {{"self", Tensor("x")}})),
              HasSubstr("aten::sym_size is not among the operators Stoker runs"));
}

TEST(CheckArgumentNamesTest, ArgumentOutsideTheSchemaIsRefused) {
  GraphNode node = Node("relu", "torch.ops.aten.relu.default",
                        {{"self", Tensor("x")}, {"inplace", {{"as_bool", true}}}});
  absl::StatusOr<NodeOperator> op = ResolveOperator(node);
  ASSERT_TRUE(op.ok()) << op.status();
  absl::Status checked = CheckArgumentNames(node, op->handle->schema());
  EXPECT_EQ(checked.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(checked.message()),
              HasSubstr("node relu (torch.ops.aten.relu.default): argument 'inplace' is not in "
                        "the operator's schema aten::relu(Tensor self) -> Tensor"));
  node.inputs.erase("inplace");
  EXPECT_TRUE(CheckArgumentNames(node, op->handle->schema()).ok());
}

TEST(CheckSeededTest, RandomOperatorWithoutGeneratorIsRefused) {
  GraphNode node = Node("alpha_dropout", "torch.ops.aten.alpha_dropout.default", {});
  absl::StatusOr<NodeOperator> op = ResolveOperator(node);
  ASSERT_TRUE(op.ok()) << op.status();
  absl::Status checked = CheckSeeded(node, *op, {});
  EXPECT_THAT(std::string(checked.message()),
              HasSubstr("node alpha_dropout (torch.ops.aten.alpha_dropout.default): a random "
                        "operator without a generator argument"));
}

TEST(CheckSeededTest, GeneratorArgumentsDropoutAndDeterministicOpsPass) {
  for (const char* target : {"torch.ops.aten.bernoulli.default", "torch.ops.aten.dropout.default",
                             "torch.ops.aten.relu.default"}) {
    GraphNode node = Node("n", target, {});
    absl::StatusOr<NodeOperator> op = ResolveOperator(node);
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_TRUE(CheckSeeded(node, *op, {}).ok()) << target;
  }
}

TEST(CheckSeededTest, AttentionIsRandomOnlyWithDropout) {
  GraphNode node = Node("sdpa", "torch.ops.aten.scaled_dot_product_attention.default", {});
  absl::StatusOr<NodeOperator> op = ResolveOperator(node);
  ASSERT_TRUE(op.ok()) << op.status();
  const c10::FunctionSchema& schema = op->handle->schema();
  std::vector<GraphArg> args(schema.arguments().size());
  const int p = *schema.argumentIndexWithName("dropout_p");
  args[p].constant = 0.0;
  EXPECT_TRUE(CheckSeeded(node, *op, args).ok());
  args[p].constant = 0.1;
  EXPECT_FALSE(CheckSeeded(node, *op, args).ok());
}

TEST(IsDropoutTest, DropoutAndItsInPlaceFormOnly) {
  NodeOperator op;
  op.name = c10::OperatorName("aten::dropout_", "");
  EXPECT_TRUE(IsDropout(op));
  op.name = c10::OperatorName("aten::alpha_dropout", "");
  EXPECT_FALSE(IsDropout(op));
}

}  // namespace
}  // namespace stoker::trainer
