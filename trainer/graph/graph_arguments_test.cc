// Tests of converting hand-written nodes' arguments for real ATen schemas: each kind of
// serialised argument through its converter (Note [Argument converters]), numbers taking
// the schema type they are passed as, defaults, generators and devices, the refusal of a
// kind without a converter, and outputs as slots.
#include "trainer/graph/graph_arguments.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <deque>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/buffer_plan.h"
#include "trainer/graph/graph_node.h"

namespace stoker::trainer {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A node `name` calling `target` on `inputs` (argument name -> Argument) with `outputs`.
GraphNode Node(const std::string& name, const std::string& target, const json& inputs,
               const json& outputs = json::array()) {
  static auto* const kKeep = new std::deque<json>();  // the nodes GraphNodes refer to
  json node = {{"name", name}, {"target", target}, {"inputs", json::array()}};
  for (const auto& [input, arg] : inputs.items())
    node["inputs"].push_back({{"name", input}, {"arg", arg}});
  node["outputs"] = outputs;
  kKeep->push_back(node);
  absl::StatusOr<GraphNode> read = ReadGraphNode(kKeep->back(), "m.pt2");
  EXPECT_TRUE(read.ok()) << read.status();
  return *read;
}

const c10::FunctionSchema& Schema(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

json Tensor(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }

class GraphArgumentsTest : public ::testing::Test {
 protected:
  // `node`'s arguments for `schema`, which must convert.
  std::vector<GraphArg> Convert(const GraphNode& node, const c10::FunctionSchema& schema) {
    absl::StatusOr<std::vector<GraphArg>> args = ConvertArguments(node, schema, plan_);
    EXPECT_TRUE(args.ok()) << args.status();
    return args.ok() ? *args : std::vector<GraphArg>(schema.arguments().size());
  }

  // The message of the refusal to convert `node`'s arguments.
  std::string Refusal(const GraphNode& node, const c10::FunctionSchema& schema) {
    absl::StatusOr<std::vector<GraphArg>> args = ConvertArguments(node, schema, plan_);
    EXPECT_FALSE(args.ok());
    if (args.ok()) return "";
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(args.status().message());
  }

  BufferPlan plan_;
};

TEST_F(GraphArgumentsTest, TensorsAreSlotsAndANumberForATensorIsAWrappedNumber) {
  std::vector<GraphArg> args = Convert(
      Node("add", "torch.ops.aten.add.Tensor", {{"self", Tensor("x")}, {"other", {{"as_int", 2}}}}),
      Schema("aten::add", "Tensor"));
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0].kind, GraphArg::Kind::kSlot);
  EXPECT_EQ(args[0].slot, plan_.FindSlot("x"));
  ASSERT_EQ(args[1].kind, GraphArg::Kind::kConstant);
  ASSERT_TRUE(args[1].constant.isTensor());
  EXPECT_TRUE(args[1].constant.toTensor().unsafeGetTensorImpl()->is_wrapped_number());
  EXPECT_EQ(args[1].constant.toTensor().item<int64_t>(), 2);
  // alpha, left out: the schema's default.
  EXPECT_EQ(args[2].kind, GraphArg::Kind::kConstant);
  EXPECT_EQ(args[2].constant.toScalar().toLong(), 1);
}

TEST_F(GraphArgumentsTest, NumbersTakeTheSchemaTypeTheyArePassedAs) {
  std::vector<GraphArg> dropout = Convert(
      Node("dropout", "torch.ops.aten.dropout.default",
           {{"input", Tensor("x")}, {"p", {{"as_int", 0}}}, {"train", {{"as_bool", true}}}}),
      Schema("aten::dropout", ""));
  EXPECT_TRUE(dropout[1].constant.isDouble());  // float p given as an int
  EXPECT_TRUE(dropout[2].constant.isBool());
  EXPECT_TRUE(dropout[2].constant.toBool());

  std::vector<GraphArg> pool = Convert(Node("pool", "torch.ops.aten.max_pool2d.default",
                                            {{"self", Tensor("x")},
                                             {"kernel_size", {{"as_int", 3}}},
                                             {"stride", {{"as_ints", {2, 2}}}},
                                             {"ceil_mode", {{"as_bool", false}}}}),
                                       Schema("aten::max_pool2d", ""));
  EXPECT_EQ(pool[1].constant.toIntVector(), (std::vector<int64_t>{3}));  // int[2] as one int
  EXPECT_EQ(pool[2].constant.toIntVector(), (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE(pool[5].constant.toBool());

  std::vector<GraphArg> leaky =
      Convert(Node("leaky", "torch.ops.aten.leaky_relu.default",
                   {{"self", Tensor("x")}, {"negative_slope", {{"as_float", 0.5}}}}),
              Schema("aten::leaky_relu", ""));
  EXPECT_TRUE(leaky[1].constant.isDouble());  // a Scalar: the number's own type
  EXPECT_EQ(leaky[1].constant.toDouble(), 0.5);
}

TEST_F(GraphArgumentsTest, SizesDtypesLayoutsDevicesAndMemoryFormats) {
  std::vector<GraphArg> args =
      Convert(Node("empty", "torch.ops.aten.empty.memory_format",
                   {{"size", {{"as_sym_ints", {{{"as_name", "s0"}}, {{"as_int", 3}}}}}},
                    {"dtype", {{"as_scalar_type", 7}}},
                    {"layout", {{"as_layout", 7}}},
                    {"device", {{"as_device", {{"type", "cuda"}, {"index", 0}}}}},
                    {"memory_format", {{"as_memory_format", 2}}}}),
              Schema("aten::empty", "memory_format"));
  ASSERT_EQ(args.size(), 6u);
  EXPECT_EQ(args[0].kind, GraphArg::Kind::kIntList);
  EXPECT_THAT(args[0].slots, ElementsAre(plan_.FindSlot("s0"), -1));
  EXPECT_THAT(args[0].ints, ElementsAre(0, 3));
  EXPECT_EQ(args[1].constant.toScalarType(), at::kFloat);
  EXPECT_EQ(args[2].constant.toLayout(), at::kStrided);
  EXPECT_EQ(args[3].kind, GraphArg::Kind::kDevice);  // Note [Devices of a program]
  EXPECT_TRUE(args[4].constant.isNone());            // pin_memory, left out
  EXPECT_EQ(args[5].constant.toMemoryFormat(), at::MemoryFormat::ChannelsLast);
}

TEST_F(GraphArgumentsTest, TensorListsOptionalTensorsStringsAndGenerators) {
  std::vector<GraphArg> cat =
      Convert(Node("cat", "torch.ops.aten.cat.default",
                   {{"tensors", {{"as_tensors", {{{"name", "a"}}, {{"name", "b"}}}}}},
                    {"dim", {{"as_int", 1}}}}),
              Schema("aten::cat", ""));
  EXPECT_EQ(cat[0].kind, GraphArg::Kind::kTensorList);
  EXPECT_THAT(cat[0].slots, ElementsAre(plan_.FindSlot("a"), plan_.FindSlot("b")));

  std::vector<GraphArg> index =
      Convert(Node("index", "torch.ops.aten.index.Tensor",
                   {{"self", Tensor("x")},
                    {"indices", {{"as_optional_tensors", {{{"as_none", true}}, Tensor("i")}}}}}),
              Schema("aten::index", "Tensor"));
  EXPECT_EQ(index[1].kind, GraphArg::Kind::kOptionalTensorList);
  EXPECT_THAT(index[1].slots, ElementsAre(-1, plan_.FindSlot("i")));

  std::vector<GraphArg> gelu =
      Convert(Node("gelu", "torch.ops.aten.gelu.default",
                   {{"self", Tensor("x")}, {"approximate", {{"as_string", "tanh"}}}}),
              Schema("aten::gelu", ""));
  EXPECT_EQ(gelu[1].constant.toStringRef(), "tanh");

  std::vector<GraphArg> bernoulli =
      Convert(Node("bernoulli", "torch.ops.aten.bernoulli.default", {{"self", Tensor("x")}}),
              Schema("aten::bernoulli", ""));
  EXPECT_EQ(bernoulli[1].kind, GraphArg::Kind::kGenerator);
}

TEST_F(GraphArgumentsTest, SymbolicIntsAreSlotsAndConstantsStayConstant) {
  std::vector<GraphArg> args = Convert(Node("select", "torch.ops.aten.select.int",
                                            {{"self", Tensor("x")},
                                             {"dim", {{"as_int", 0}}},
                                             {"index", {{"as_sym_int", {{"as_name", "s1"}}}}}}),
                                       Schema("aten::select", "int"));
  EXPECT_EQ(args[2].kind, GraphArg::Kind::kSlot);
  EXPECT_EQ(args[2].slot, plan_.FindSlot("s1"));

  GraphArg constant;
  EXPECT_TRUE(ConvertSymInt({{"as_sym_int", {{"as_int", 4}}}}, plan_, &constant));
  EXPECT_EQ(constant.kind, GraphArg::Kind::kConstant);
  EXPECT_EQ(constant.constant.toInt(), 4);
  GraphArg other;
  EXPECT_FALSE(ConvertSymInt({{"as_float", 1.5}}, plan_, &other));
}

TEST_F(GraphArgumentsTest, RefusalsNameTheNodeAndTheArgument) {
  const c10::FunctionSchema& add = Schema("aten::add", "Tensor");
  EXPECT_EQ(Refusal(Node("add", "torch.ops.aten.add.Tensor", {{"self", Tensor("x")}}), add),
            "m.pt2: node add (torch.ops.aten.add.Tensor): argument 'other' is missing and has "
            "no default");
  EXPECT_EQ(
      Refusal(Node("add", "torch.ops.aten.add.Tensor",
                   {{"self", Tensor("x")}, {"other", {{"as_sym_float", {{"as_name", "f"}}}}}}),
              add),
      "m.pt2: node add (torch.ops.aten.add.Tensor): argument other is of kind "
      "as_sym_float, which Stoker does not convert (symbolic floats or bools, custom "
      "objects, operators)");
  EXPECT_EQ(Refusal(Node("select", "torch.ops.aten.select.int",
                         {{"self", Tensor("x")},
                          {"dim", {{"as_int", 0}}},
                          {"index", {{"as_sym_int", {{"as_float", 1.0}}}}}}),
                    Schema("aten::select", "int")),
            "m.pt2: node select (torch.ops.aten.select.int): argument index: malformed symbolic "
            "int");
  EXPECT_THAT(Refusal(Node("to", "torch.ops.aten.empty.memory_format",
                           {{"size", {{"as_ints", {1}}}}, {"dtype", {{"as_scalar_type", 99}}}}),
                      Schema("aten::empty", "memory_format")),
              HasSubstr("node to (torch.ops.aten.empty.memory_format): argument dtype: unknown "
                        "dtype code 99"));
}

TEST_F(GraphArgumentsTest, ReturnsAreSlotsAndTheirCountMustMatch) {
  const c10::FunctionSchema& split = Schema("aten::split", "Tensor");
  GraphCall call;
  ASSERT_TRUE(
      ConvertReturns(Node("split", "torch.ops.aten.split.Tensor", json::object(),
                          json::array({{{"as_tensors", {{{"name", "p"}}, {{"name", "q"}}}}}})),
                     split, plan_, &call)
          .ok());
  ASSERT_EQ(call.outputs.size(), 1u);
  EXPECT_TRUE(call.list_output[0]);
  EXPECT_THAT(call.outputs[0], ElementsAre(plan_.FindSlot("p"), plan_.FindSlot("q")));

  GraphCall two;
  absl::Status refused = ConvertReturns(Node("split", "torch.ops.aten.split.Tensor", json::object(),
                                             json::array({Tensor("p"), Tensor("q")})),
                                        split, plan_, &two);
  EXPECT_EQ(refused.message(),
            "m.pt2: node split (torch.ops.aten.split.Tensor): the node has 2 outputs, the "
            "operator returns 1");

  const int size = OutputSlot({{"as_sym_int", {{"as_name", "s2"}}}}, plan_);
  EXPECT_EQ(size, plan_.FindSlot("s2"));
  EXPECT_EQ(OutputSlot({{"as_none", true}}, plan_), -1);
}

}  // namespace
}  // namespace stoker::trainer
