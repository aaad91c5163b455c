// Tests of reading a program's signature from hand-written specs: parameters, buffers and
// tensor constants bound to the model's tensors, the one image batch and its size, the one logits
// tensor and its classes, buffer updates, and each refusal's wording.
#include "trainer/graph/graph_signature.h"

#include <ATen/ATen.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A program taking p_fc_weight (fc.weight), b_bn_count (bn.count) and the image batch x
// ([batch, 3, 16, 16] float), returning linear ([batch, 10]) and updating bn.count to add.
json Program() {
  return json::parse(R"({
    "graph": {
      "tensor_values": {
        "x": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "s0"}}, {"as_int": 3},
                                    {"as_int": 16}, {"as_int": 16}]},
        "linear": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "s0"}}, {"as_int": 10}]}
      },
      "nodes": []
    },
    "signature": {
      "input_specs": [
        {"parameter": {"arg": {"name": "p_fc_weight"}, "parameter_name": "fc.weight"}},
        {"buffer": {"arg": {"name": "b_bn_count"}, "buffer_name": "bn.count",
                    "persistent": true}},
        {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}
      ],
      "output_specs": [
        {"buffer_mutation": {"arg": {"name": "add"}, "buffer_name": "bn.count"}},
        {"user_output": {"arg": {"as_tensor": {"name": "linear"}}}}
      ]
    }
  })");
}

class GraphSignatureTest : public ::testing::Test {
 protected:
  GraphSignatureTest() {
    state_.parameters["fc.weight"] = at::zeros({10, 48});
    state_.buffers["bn.count"] = at::zeros({}, at::kLong);
  }

  // The message of the refusal of `program`.
  std::string Refusal(const json& program, SignatureExpectations expect = {"m.pt2", 0, 0}) {
    absl::StatusOr<ProgramSignature> read = ReadProgramSignature(program, state_, expect);
    EXPECT_FALSE(read.ok()) << "read";
    if (read.ok()) return "";
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(read.status().message());
  }

  GraphState state_;
};

TEST_F(GraphSignatureTest, ReadsWeightsInputOutputAndBufferUpdates) {
  absl::StatusOr<ProgramSignature> read =
      ReadProgramSignature(Program(), state_, {"m.pt2", 10, 16});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->weights.size(), 2u);
  EXPECT_EQ(read->weights[0].value, "p_fc_weight");
  EXPECT_TRUE(read->weights[0].tensor.is_same(state_.parameters["fc.weight"]));
  EXPECT_FALSE(read->weights[0].is_buffer);
  EXPECT_EQ(read->weights[1].value, "b_bn_count");
  EXPECT_TRUE(read->weights[1].is_buffer);
  EXPECT_EQ(read->input, "x");
  EXPECT_EQ(read->channels, 3);
  EXPECT_EQ(read->image_size, 16);
  EXPECT_EQ(read->output, "linear");
  EXPECT_EQ(read->num_classes, 10);
  ASSERT_EQ(read->buffer_mutations.size(), 1u);
  EXPECT_EQ(read->buffer_mutations[0].value, "add");
  EXPECT_TRUE(read->buffer_mutations[0].tensor.is_same(state_.buffers["bn.count"]));
}

TEST_F(GraphSignatureTest, ProgramWithoutSignatureIsRefused) {
  json program = Program();
  program.erase("signature");
  EXPECT_EQ(Refusal(program), "m.pt2: the program has no graph or signature");
}

TEST_F(GraphSignatureTest, WeightTheStateLacksIsRefused) {
  state_.parameters.clear();
  EXPECT_EQ(Refusal(Program()),
            "m.pt2: the program reads parameter fc.weight, which the archive's weights lack");
}

TEST_F(GraphSignatureTest, TensorConstantsBindToTheStatesConstants) {
  json program = Program();
  program["signature"]["input_specs"].insert(
      program["signature"]["input_specs"].begin() + 2,
      json::parse(R"({"tensor_constant": {"arg": {"name": "c_lifted_tensor_0"},
                                          "tensor_constant_name": "lifted_tensor_0"}})"));
  state_.constants["lifted_tensor_0"] = at::arange(4);
  absl::StatusOr<ProgramSignature> read = ReadProgramSignature(program, state_, {"m.pt2", 10, 16});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->weights.size(), 3u);
  EXPECT_EQ(read->weights[2].value, "c_lifted_tensor_0");
  EXPECT_TRUE(read->weights[2].tensor.is_same(state_.constants["lifted_tensor_0"]));
  EXPECT_FALSE(read->weights[2].is_buffer);

  state_.constants.clear();
  EXPECT_EQ(Refusal(program),
            "m.pt2: the program reads tensor constant lifted_tensor_0, which the archive's "
            "constants lack");
}

TEST_F(GraphSignatureTest, InputOfAnotherKindIsRefused) {
  json program = Program();
  program["signature"]["input_specs"].push_back(
      json::parse(R"({"constant_input": {"name": "c"}})"));
  EXPECT_THAT(Refusal(program), HasSubstr("the program has an input of kind 'constant_input'"));
}

TEST_F(GraphSignatureTest, SecondImageInputIsRefused) {
  json program = Program();
  program["signature"]["input_specs"].push_back(
      json::parse(R"({"user_input": {"arg": {"as_tensor": {"name": "y"}}}})"));
  EXPECT_THAT(Refusal(program), HasSubstr("the program's input is not one NCHW image batch"));
}

TEST_F(GraphSignatureTest, ImageBatchOfOtherRankIsRefused) {
  json program = Program();
  program["graph"]["tensor_values"]["x"]["sizes"].erase(3);
  EXPECT_EQ(Refusal(program),
            "m.pt2: input x is not one NCHW image batch: it has 3 dimensions, not 4");
}

TEST_F(GraphSignatureTest, IntegerImagesAreRefused) {
  json program = Program();
  program["graph"]["tensor_values"]["x"]["dtype"] = 1;
  EXPECT_THAT(Refusal(program), HasSubstr("its dtype is Byte, not a float type"));
}

TEST_F(GraphSignatureTest, StaticBatchIsRefused) {
  json program = Program();
  program["graph"]["tensor_values"]["x"]["sizes"][0] = json::parse(R"({"as_int": 2})");
  EXPECT_THAT(Refusal(program), HasSubstr("input x has a static batch size of 2"));
}

TEST_F(GraphSignatureTest, DynamicHeightIsRefused) {
  json program = Program();
  program["graph"]["tensor_values"]["x"]["sizes"][2] =
      json::parse(R"({"as_expr": {"expr_str": "s1"}})");
  EXPECT_THAT(Refusal(program), HasSubstr("input x: dimension 2 is dynamic (s1)"));
}

TEST_F(GraphSignatureTest, OtherChannelCountsAndNonSquareImagesAreRefused) {
  json gray = Program();
  gray["graph"]["tensor_values"]["x"]["sizes"][1]["as_int"] = 1;
  EXPECT_THAT(Refusal(gray), HasSubstr("it has 1 channels, the data service feeds 3 (RGB)"));
  json wide = Program();
  wide["graph"]["tensor_values"]["x"]["sizes"][3]["as_int"] = 32;
  EXPECT_THAT(Refusal(wide), HasSubstr("input x is 16x32; the data service feeds square images"));
}

TEST_F(GraphSignatureTest, OtherImageSizeOrClassCountThanAskedIsRefused) {
  EXPECT_EQ(Refusal(Program(), {"m.pt2", 0, 32}),
            "m.pt2: the program was exported for 16x16 images, but --image_size=32");
  EXPECT_EQ(Refusal(Program(), {"m.pt2", 5, 0}),
            "m.pt2: the program's logits have 10 classes, but --num_classes=5");
}

TEST_F(GraphSignatureTest, OutputsOtherThanOneLogitsTensorAreRefused) {
  json pair = Program();
  pair["signature"]["output_specs"].push_back(
      json::parse(R"({"user_output": {"arg": {"as_tensor": {"name": "y"}}}})"));
  EXPECT_THAT(Refusal(pair), HasSubstr("the program's output is not one logits tensor (it "
                                       "returns several values, or a non-tensor)"));
  json none = Program();
  none["signature"]["output_specs"].erase(1);
  EXPECT_EQ(Refusal(none),
            "m.pt2: the program's output is not one logits tensor (it returns none)");
  json flat = Program();
  flat["graph"]["tensor_values"]["linear"]["sizes"].erase(1);
  EXPECT_THAT(Refusal(flat), HasSubstr("the program's output linear is not one logits tensor of "
                                       "shape [batch, classes]"));
}

TEST_F(GraphSignatureTest, UpdateOfAnUnknownBufferIsRefused) {
  state_.buffers.clear();
  json program = Program();
  program["signature"]["input_specs"].erase(1);
  EXPECT_EQ(Refusal(program),
            "m.pt2: the program updates buffer bn.count, which the archive lacks");
}

TEST_F(GraphSignatureTest, OutputOfAnotherKindIsRefused) {
  json program = Program();
  program["signature"]["output_specs"].push_back(
      json::parse(R"({"loss_output": {"arg": {"as_tensor": {"name": "loss"}}}})"));
  EXPECT_THAT(Refusal(program), HasSubstr("the program has an output of kind 'loss_output'"));
}

}  // namespace
}  // namespace stoker::trainer
