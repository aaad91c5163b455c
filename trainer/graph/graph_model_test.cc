// Tests that torchvision models exported by tools/export_model.py train in Stoker as they do
// in PyTorch: for the same weights and batch, the first step's loss, every parameter's
// gradient and the batch-norm statistics after the step equal PyTorch's (fp32), and after
// three optimizer steps the weights Stoker exports load into the torchvision class with
// load_state_dict(strict=True) and give Stoker's evaluation logits. Models with dropout or
// stochastic depth are exported with them off (graph_random_test.cc tests random ops).
// torchvision runs in $STOKER_PYTHON.
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/testing/python_runner.h"
#include "gtest/gtest.h"
#include "trainer/graph/graph_model.h"
#include "trainer/nn/state_dict.h"
#include "trainer/nn/state_dict_file.h"

namespace stoker::trainer {
namespace {

using testing::TempPath;

std::string ExportTool() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/stoker/tools/export_model.py");
}

// The {name: tensor} dict that Python's torch.save wrote at `path`.
std::map<std::string, at::Tensor> ReadTensors(const std::string& path) {
  absl::StatusOr<std::map<std::string, at::Tensor>> tensors = ReadStateDictFile(path);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *std::move(tensors) : std::map<std::string, at::Tensor>();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// max |a - b| / max(|b|, tiny): the error relative to the reference's largest entry.
double RelativeToMax(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
  const double scale = y.abs().max().item<double>();
  const double diff = (x - y).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

struct Case {
  const char* arch;  // torchvision.models.<arch>: a model builder or a model class
  int image_size;
  const char* kwargs;        // JSON: dropout and stochastic depth off, ViT's image size
  bool fused_blocks = true;  // the program's fused-block rewrite (the CPU runs its composition)
  // The rewrite's expected {batch norm alone, batch norm + ReLU, batch norm + add + ReLU, max
  // pool} counts in the training program; -1: not checked.
  int fused[4] = {-1, -1, -1, -1};
};

constexpr int kClasses = 10;
constexpr int kBatch = 4;

class TorchvisionExportTest : public ::testing::TestWithParam<Case> {};

// Exports the model with tools/export_model.py and computes PyTorch's first step on one
// batch: the batch, the loss, every gradient and the buffers after the step.
constexpr char kExportAndReference[] = R"py(
import json, runpy, sys, torch, torchvision
tool, arch, size, classes, batch, kwargs, archive, reference = sys.argv[1:]
size, classes, batch = int(size), int(classes), int(batch)
sys.argv = [tool, "torchvision.models:" + arch, "--num_classes", str(classes), "--image_size", str(size),
            "--kwargs", kwargs, "--seed", "7", "--out", archive]
runpy.run_path(tool, run_name="__main__")
torch.manual_seed(7)
model = getattr(torchvision.models, arch)(num_classes=classes, **json.loads(kwargs))
g = torch.Generator().manual_seed(3)
x = torch.randn(batch, 3, size, size, generator=g)
y = torch.randint(0, classes, (batch,), generator=g)
x_eval = torch.randn(batch, 3, size, size, generator=g)
model.train()
loss = torch.nn.functional.cross_entropy(model(x), y)
loss.backward()
ref = {"x": x, "y": y, "x_eval": x_eval, "loss": loss.detach()}
for k, p in model.named_parameters():
    ref["grad." + k] = p.grad
for k, b in model.named_buffers():
    ref["buffer." + k] = b
torch.save(ref, reference)
)py";

// Loads Stoker's exported weights into the torchvision class (strict) and prints the
// largest |logit difference| and |logit| in evaluation mode.
constexpr char kCompareExported[] = R"py(
import json, sys, torch, torchvision
arch, classes, kwargs, weights, reference, logits = sys.argv[1:]
model = getattr(torchvision.models, arch)(num_classes=int(classes), **json.loads(kwargs))
model.load_state_dict(torch.load(weights, weights_only=True), strict=True)
model.eval()
x = torch.load(reference, weights_only=True)["x_eval"]
ours = torch.load(logits, weights_only=False)["logits"]  # written by torch::pickle_save
with torch.no_grad():
    theirs = model(x)
print(float((theirs.double() - ours.double()).abs().max()), float(theirs.abs().max()))
)py";

TEST_P(TorchvisionExportTest, TrainsAsInPyTorchAndExportsWeightsTorchvisionLoads) {
  const Case& c = GetParam();
  const std::string archive = TempPath(absl::StrCat(c.arch, ".pt2"));
  const std::string reference = TempPath(absl::StrCat(c.arch, "_reference.pt"));
  absl::StatusOr<std::string> exported = testing::RunPython(
      kExportAndReference,
      {ExportTool(), c.arch, std::to_string(c.image_size), std::to_string(kClasses),
       std::to_string(kBatch), c.kwargs, archive, reference},
      /*timeout_s=*/600);
  ASSERT_TRUE(exported.ok()) << exported.status();
  std::cerr << *exported;

  absl::StatusOr<std::shared_ptr<GraphModel>> loaded =
      GraphModel::Load(archive, {kClasses, c.image_size, c.fused_blocks});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  GraphModel& model = **loaded;
  EXPECT_TRUE(model.has_eval_program());
  const FusedBlockCounts& fused = model.train_program().fused_blocks();
  std::cerr << c.arch << ": fused blocks " << fused.batch_norm << " batch norm alone, "
            << fused.batch_norm_relu << " batch norm + ReLU, " << fused.batch_norm_add_relu
            << " batch norm + add + ReLU, " << fused.max_pool << " max pool\n";
  if (!c.fused_blocks) {
    EXPECT_EQ(fused.batch_norm + fused.batch_norm_relu + fused.batch_norm_add_relu + fused.max_pool,
              0);
  } else if (c.fused[0] >= 0) {
    EXPECT_EQ(fused.batch_norm, c.fused[0]);
    EXPECT_EQ(fused.batch_norm_relu, c.fused[1]);
    EXPECT_EQ(fused.batch_norm_add_relu, c.fused[2]);
    EXPECT_EQ(fused.max_pool, c.fused[3]);
  }
  std::map<std::string, at::Tensor> ref = ReadTensors(reference);

  // First step: loss, gradients, statistics.
  model.train();
  at::Tensor loss = at::cross_entropy_loss(model.forward(ref["x"]), ref["y"]);
  loss.backward();
  const double loss_error = RelativeToMax(loss.detach(), ref["loss"]);
  EXPECT_LE(loss_error, 1e-6) << "loss " << loss.item<double>() << " vs "
                              << ref["loss"].item<double>();
  double worst_grad = 0;
  int parameters = 0;
  for (const auto& item : model.named_parameters()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(ref.count("grad." + item.key()));
    ASSERT_TRUE(item.value().grad().defined());
    const double e = RelativeToMax(item.value().grad(), ref["grad." + item.key()]);
    EXPECT_LE(e, 1e-5);
    worst_grad = std::max(worst_grad, e);
    ++parameters;
  }
  double worst_buffer = 0;
  for (const auto& item : model.named_buffers()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(ref.count("buffer." + item.key()));
    const double e = RelativeToMax(item.value(), ref["buffer." + item.key()]);
    EXPECT_LE(e, 1e-6);
    worst_buffer = std::max(worst_buffer, e);
  }
  std::cerr << c.arch << ": loss " << loss.item<double>() << " (relative error " << loss_error
            << "), " << parameters << " gradients (worst " << worst_grad
            << " of their max), buffers worst " << worst_buffer << "\n";

  // Three steps of plain SGD (the first with the gradients above), then evaluation logits
  // and the exported weights.
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      for (at::Tensor& p : model.parameters()) p.mutable_grad() = at::Tensor();
      at::cross_entropy_loss(model.forward(ref["x"]), ref["y"]).backward();
    }
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : model.parameters()) p.sub_(p.grad(), 0.01);
  }
  model.eval();
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model.forward(ref["x_eval"]);
  }
  absl::StatusOr<std::string> weights = PickleStateDict(model);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const std::string weights_path = TempPath(absl::StrCat(c.arch, "_trained.pt"));
  WriteFile(weights_path, *weights);
  const std::string logits_path = TempPath(absl::StrCat(c.arch, "_logits.pt"));
  {
    c10::Dict<std::string, at::Tensor> dict;
    dict.insert("logits", logits);
    const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
    WriteFile(logits_path, std::string(bytes.begin(), bytes.end()));
  }
  absl::StatusOr<std::string> compared = testing::RunPython(
      kCompareExported,
      {c.arch, std::to_string(kClasses), c.kwargs, weights_path, reference, logits_path});
  ASSERT_TRUE(compared.ok()) << compared.status();
  std::vector<std::string> fields = absl::StrSplit(*compared, ' ', absl::SkipWhitespace());
  ASSERT_EQ(fields.size(), 2u) << *compared;
  const double diff = std::strtod(fields[0].c_str(), nullptr);
  const double scale = std::strtod(fields[1].c_str(), nullptr);
  EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << "largest |logit| " << scale;
  std::cerr << c.arch
            << ": after 3 steps, torchvision's logits from the exported weights differ by " << diff
            << " (largest |logit| " << scale << ")\n";
}

INSTANTIATE_TEST_SUITE_P(
    Torchvision, TorchvisionExportTest,
    // A ResNet's stem and each block's inner batch norms end in ReLU, each block's last one
    // in add + ReLU; the downsample branches' batch norms are fused alone.
    ::testing::Values(Case{"resnet18", 32, "{}", true, {3, 9, 8, 1}},
                      Case{"resnet18", 32, "{}", false},
                      Case{"resnet50", 32, "{}", true, {4, 33, 16, 1}},
                      Case{"mobilenet_v3_small", 32, R"({"dropout": 0.0})"},
                      Case{"efficientnet_b0", 32,
                           R"({"dropout": 0.0, "stochastic_depth_prob": 0.0})"},
                      Case{"convnext_tiny", 32, R"({"stochastic_depth_prob": 0.0})"},
                      // vit_b_16's class with fewer and narrower layers: the same
                      // operations in a model a thousand times smaller.
                      Case{"VisionTransformer", 32,
                           R"({"image_size": 32, "patch_size": 8, "num_layers": 2,
                               "num_heads": 4, "hidden_dim": 64, "mlp_dim": 128})"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.arch, info.param.fused_blocks ? "" : "_unfused");
    });

}  // namespace
}  // namespace stoker::trainer
