// Tests that GraphModel::Load refuses, with a message naming the file, the node, the
// operator and the reason, every archive the trainer could not train: files that are not
// torch.export archives of this torch release, operators outside ATen or outside the
// operators Stoker runs (an archive edited to write a file), control flow, random ops it
// could not seed, shapes the data service cannot feed, inputs and outputs that are not one
// image batch and one logits tensor. The archives are made by torch.export in
// $STOKER_PYTHON.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <torch/types.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "common/testing/python_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/graph/graph_model.h"

namespace stoker::trainer {
namespace {

using ::testing::HasSubstr;

std::string Archive(absl::string_view name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, ".pt2");
}

// The bytes of the file at `path`; "" when there is none.
std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

constexpr char kMakeArchives[] = R"py(
import json, os, sys, zipfile, torch
from torch.export import Dim
out = sys.argv[1]
batch = Dim("batch")
x = torch.randn(2, 3, 16, 16)

class Net(torch.nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, classes)
    def head(self, y):
        return self.fc(y.mean((2, 3)))
    def forward(self, x):
        return self.head(self.conv(x))

@torch.library.custom_op("stoker_test::twice", mutates_args=())
def twice(t: torch.Tensor) -> torch.Tensor:
    return t * 2

@twice.register_fake
def _(t):
    return torch.empty_like(t)

class CustomOp(Net):
    def forward(self, x):
        return self.head(twice(self.conv(x)))

class Branch(Net):
    def forward(self, x):
        y = self.conv(x)
        y = torch.cond(y.sum() > 0, lambda t: t * 2, lambda t: t - 1, (y,))
        return self.head(y)

class AlphaDropout(Net):
    def forward(self, x):
        return self.head(torch.nn.functional.alpha_dropout(self.conv(x), 0.2, training=True))

class TwoInputs(Net):
    def forward(self, x, bias):
        return self.head(self.conv(x)) + bias

class Flat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 10)
    def forward(self, x):
        return self.fc(x)

class Pair(Net):
    def forward(self, x):
        y = self.conv(x).mean((2, 3))
        return self.fc(y), y

def save(name, module, args, dynamic_shapes):
    torch.export.save(torch.export.export(module, args, dynamic_shapes=dynamic_shapes), f"{out}/{name}.pt2")

save("good", Net(), (x,), ({0: batch},))
save("custom_op", CustomOp(), (x,), ({0: batch},))
save("control_flow", Branch(), (x,), ({0: batch},))
save("alpha_dropout", AlphaDropout(), (x,), ({0: batch},))
save("dynamic_height", Net(), (x,), ({0: batch, 2: Dim("height", min=8, max=64)},))
save("static_batch", Net(), (x,), None)
save("two_inputs", TwoInputs(), (x, torch.randn(2, 10)), ({0: batch}, {0: batch}))
save("flat_input", Flat(), (torch.randn(2, 48),), ({0: batch},))
save("pair_output", Pair(), (x,), ({0: batch},))

class ViewAfterContiguous(Net):
    """Its .contiguous() is a no-op when traced, so the archive holds the bare view."""
    def forward(self, x):
        y = self.conv(x)
        return self.fc(y.contiguous().view(y.shape[0], -1, 8).mean(1))

save("view_after_contiguous", ViewAfterContiguous(), (x,), ({0: batch},))

good = open(f"{out}/good.pt2", "rb").read()
open(f"{out}/truncated.pt2", "wb").write(good[: len(good) // 2])
open(f"{out}/not_zip.pt2", "wb").write(b"these bytes are no zip file at all" * 10)
torch.save(Net().state_dict(), f"{out}/state_dict.pt2")

def edited(name, edit):
    """good.pt2 with its models/model.json bytes passed through `edit`, as archive `name`."""
    with zipfile.ZipFile(f"{out}/good.pt2") as src, zipfile.ZipFile(f"{out}/{name}.pt2", "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("models/model.json"):
                data = edit(data)
            dst.writestr(info.filename, data)

# The same archive as written by another torch release.
edited("other_torch", lambda data: data.replace(torch.__version__.encode(), b"2.9.1+cpu"))

def node(name, target, **inputs):
    return {"target": target, "name": name, "metadata": {},
            "inputs": [{"name": k, "arg": v, "kind": 1} for k, v in inputs.items()],
            "outputs": [{"as_tensor": {"name": name}}]}

def write_files(data):
    """Maps victim.txt and appears.txt MAP_SHARED and copies the fc bias into them."""
    model = json.loads(data)
    graph = model["graph_module"]["graph"]
    nodes = []
    for file in ("victim", "appears"):
        nodes.append(node(f"{file}_mapped", "torch.ops.aten.from_file.default",
                          filename={"as_string": f"{out}/{file}.txt"}, shared={"as_bool": True},
                          size={"as_int": 10}))
        nodes.append(node(f"{file}_written", "torch.ops.aten.copy_.default",
                          self={"as_tensor": {"name": f"{file}_mapped"}},
                          src={"as_tensor": {"name": "p_fc_bias"}}))
        for n in nodes[-2:]:
            graph["tensor_values"][n["name"]] = graph["tensor_values"]["p_fc_bias"]
    graph["nodes"][:0] = nodes
    return json.dumps(model).encode()

open(f"{out}/victim.txt", "wb").write(b"bytes that no archive may overwrite: " * 4)
edited("writes_file", write_files)
print("made")
)py";

class GraphRefusalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> made =
        testing::RunPython(kMakeArchives, {std::getenv("TEST_TMPDIR")});
    ASSERT_TRUE(made.ok()) << made.status();
  }

  // The message of Load's refusal of archive `name`.
  static std::string Refusal(absl::string_view name, GraphModelOptions options = {10, 16}) {
    absl::StatusOr<std::shared_ptr<GraphModel>> loaded = GraphModel::Load(Archive(name), options);
    EXPECT_FALSE(loaded.ok()) << name << " loaded";
    if (loaded.ok()) return "";
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(Archive(name)))
        << "the message names the file";
    return std::string(loaded.status().message());
  }
};

TEST_F(GraphRefusalTest, AGoodArchiveLoads) {
  absl::StatusOr<std::shared_ptr<GraphModel>> loaded = GraphModel::Load(Archive("good"), {10, 16});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE((*loaded)->has_eval_program());
  EXPECT_EQ((*loaded)->num_classes(), 10);
}

// Note [Views as eager left them] (graph_program.cc): a channels-last batch makes the
// convolution's output channels-last, where the recorded view exists only as a copy.
TEST_F(GraphRefusalTest, ViewWhoseContiguousExportDroppedRunsOnAnyLayout) {
  absl::StatusOr<std::shared_ptr<GraphModel>> loaded =
      GraphModel::Load(Archive("view_after_contiguous"), {10, 16});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  torch::NoGradGuard no_grad;
  const torch::Tensor images = torch::randn({2, 3, 16, 16});
  const torch::Tensor plain = (*loaded)->forward(images);
  const torch::Tensor channels_last =
      (*loaded)->forward(images.contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::allclose(plain, channels_last, 1e-5, 1e-6));
}

TEST_F(GraphRefusalTest, ErrorAtRunTimeNamesTheNode) {
  absl::StatusOr<std::shared_ptr<GraphModel>> loaded = GraphModel::Load(Archive("good"), {10, 16});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  try {
    (*loaded)->forward(torch::randn({2, 3, 16, 16}, torch::kFloat64));
    ADD_FAILURE() << "a float64 batch against float32 weights ran";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("node conv2d (torch.ops.aten.conv2d"));
  }
}

TEST_F(GraphRefusalTest, MissingFileIsRefused) {
  EXPECT_THAT(Refusal("no_such_file"), HasSubstr("cannot open the file"));
}

TEST_F(GraphRefusalTest, TruncatedFileIsRefused) {
  EXPECT_THAT(Refusal("truncated"), HasSubstr("not a readable torch.export archive (truncated"));
}

TEST_F(GraphRefusalTest, FileThatIsNoZipIsRefused) {
  EXPECT_THAT(Refusal("not_zip"),
              HasSubstr("not a readable torch.export archive (truncated, or not a zip file"));
}

TEST_F(GraphRefusalTest, TorchSaveFileIsNotAnExportArchive) {
  EXPECT_THAT(Refusal("state_dict"), HasSubstr("a zip file but not a torch.export archive"));
}

TEST_F(GraphRefusalTest, ArchiveOfAnotherTorchReleaseIsRefused) {
  EXPECT_THAT(
      Refusal("other_torch"),
      HasSubstr(
          "exported by torch 2.9.1+cpu; Stoker runs graphs of torch 2.11: export the model again"));
}

TEST_F(GraphRefusalTest, CustomOperatorIsRefusedByNodeAndOp) {
  EXPECT_THAT(Refusal("custom_op"),
              HasSubstr("node twice (torch.ops.stoker_test.twice.default): not an ATen operator"));
}

TEST_F(GraphRefusalTest, OperatorOutsideTheAllowlistIsRefusedBeforeItRuns) {
  const std::string victim = absl::StrCat(std::getenv("TEST_TMPDIR"), "/victim.txt");
  const std::string appears = absl::StrCat(std::getenv("TEST_TMPDIR"), "/appears.txt");
  const std::string before = Contents(victim);
  ASSERT_FALSE(before.empty());
  EXPECT_THAT(Refusal("writes_file"),
              HasSubstr("node victim_mapped (torch.ops.aten.from_file.default): aten::from_file "
                        "is not among the operators Stoker runs: it reads or writes files"));
  EXPECT_EQ(Contents(victim), before) << "the archive wrote into " << victim;
  EXPECT_FALSE(std::filesystem::exists(appears)) << "the archive made " << appears;
}

TEST_F(GraphRefusalTest, ControlFlowIsRefusedByNodeAndOp) {
  const std::string message = Refusal("control_flow");
  EXPECT_THAT(message, HasSubstr("node cond (torch.ops.higher_order.cond)"));
  EXPECT_THAT(message, HasSubstr("control flow"));
}

TEST_F(GraphRefusalTest, RandomOpWithoutGeneratorIsRefused) {
  EXPECT_THAT(
      Refusal("alpha_dropout"),
      HasSubstr(
          "node alpha_dropout (torch.ops.aten.alpha_dropout.default): a random operator without a "
          "generator argument"));
}

TEST_F(GraphRefusalTest, DynamicImageSizeIsRefused) {
  EXPECT_THAT(Refusal("dynamic_height"), HasSubstr("input x: dimension 2 is dynamic"));
}

TEST_F(GraphRefusalTest, StaticBatchSizeIsRefused) {
  const std::string message = Refusal("static_batch");
  EXPECT_THAT(message, HasSubstr("input x has a static batch size of 2"));
  EXPECT_THAT(message, HasSubstr("torch.export.Dim(\"batch\")"));
}

TEST_F(GraphRefusalTest, TwoInputsAreNotOneImageBatch) {
  EXPECT_THAT(Refusal("two_inputs"), HasSubstr("the program's input is not one NCHW image batch"));
}

TEST_F(GraphRefusalTest, FlatInputIsNotAnImageBatch) {
  EXPECT_THAT(Refusal("flat_input", {10, 0}),
              HasSubstr("input x is not one NCHW image batch: it has 2 dimensions"));
}

TEST_F(GraphRefusalTest, TupleOutputIsNotOneLogitsTensor) {
  EXPECT_THAT(Refusal("pair_output"), HasSubstr("the program's output is not one logits tensor"));
}

TEST_F(GraphRefusalTest, OtherClassCountIsRefused) {
  EXPECT_THAT(Refusal("good", {5, 16}),
              HasSubstr("the program's logits have 10 classes, but --num_classes=5"));
}

TEST_F(GraphRefusalTest, OtherImageSizeIsRefused) {
  EXPECT_THAT(Refusal("good", {10, 32}),
              HasSubstr("exported for 16x16 images, but --image_size=32"));
}

}  // namespace
}  // namespace stoker::trainer
