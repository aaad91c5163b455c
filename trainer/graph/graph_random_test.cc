// Tests the random ops and the evaluation mode of exported models: dropout and stochastic
// depth draw from the model's generator, so with seed s Stoker's training-mode logits are
// PyTorch's after torch.manual_seed(s) (the CPU kernels draw the same way), the same seed
// gives the same masks and another seed others; evaluation runs the evaluation program, or
// for a plain torch.export.save archive the training program without dropout, with batch
// norm's running statistics and without updating them. PyTorch runs in $STOKER_PYTHON.
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/python_runner.h"
#include "gtest/gtest.h"
#include "trainer/graph/graph_model.h"
#include "trainer/graph/torchvision_check.h"

namespace stoker::trainer {
namespace {

using testing::TempPath;

// A small network with batch norm, dropout and torchvision's stochastic depth, with
// running statistics set away from their initial values. Writes Stoker's archive (both
// programs, tools/export_model.py), a plain torch.export.save archive of the training
// program, and PyTorch's logits: training mode after torch.manual_seed(s) for s in 11, 12,
// and evaluation mode.
constexpr char kMakeModels[] = R"py(
import os, runpy, sys, torch, torchvision
out, tool = sys.argv[1], sys.argv[2]
module_dir = os.path.join(out, "models")
os.makedirs(module_dir, exist_ok=True)
with open(os.path.join(module_dir, "noisy_net.py"), "w") as f:
    f.write('''
import torch, torchvision

class NoisyNet(torch.nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.depth = torchvision.ops.StochasticDepth(0.3, "row")
        self.drop = torch.nn.Dropout(0.4)
        self.fc = torch.nn.Linear(16, num_classes)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = y + self.depth(y)
        return self.fc(self.drop(y.mean((2, 3))))
''')
sys.path.insert(0, module_dir)
from noisy_net import NoisyNet
os.chdir(module_dir)
sys.argv = [tool, "noisy_net:NoisyNet", "--num_classes", "10", "--image_size", "8", "--seed", "1",
            "--out", os.path.join(out, "noisy.pt2")]
runpy.run_path(tool, run_name="__main__")
torch.manual_seed(1)
model = NoisyNet()
# The plain archive: a training-mode export, whose evaluation Stoker derives from it
# (Note [Evaluation from the training program]); stochastic depth, frozen there in its
# training branch, is left out (p = 0 takes no branch).
plain = NoisyNet()
plain.load_state_dict(model.state_dict())
plain.depth.p = 0.0
plain.train()
torch.export.save(torch.export.export(plain, (torch.randn(2, 3, 8, 8),),
                                      dynamic_shapes=({0: torch.export.Dim("batch")},)),
                  os.path.join(out, "noisy_plain.pt2"))
x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(5))
ref = {"x": x}
state = {k: v.clone() for k, v in model.state_dict().items()}
for archive, net in (("noisy.pt2", model), ("noisy_plain.pt2", plain)):
    for seed in (11, 12):
        net.load_state_dict(state)
        net.train()
        torch.manual_seed(seed)
        ref[f"{archive} train{seed}"] = net(x).detach()
model.load_state_dict(state)
model.eval()
with torch.no_grad():
    ref["eval"] = model(x)
torch.save(ref, os.path.join(out, "noisy_reference.pt"))
)py";

class GraphRandomTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> made = testing::RunPython(
        kMakeModels, {std::getenv("TEST_TMPDIR"),
                      absl::StrCat(std::getenv("TEST_SRCDIR"), "/stoker/tools/export_model.py")});
    ASSERT_TRUE(made.ok()) << made.status();
  }

  static std::shared_ptr<GraphModel> Load(absl::string_view name) {
    absl::StatusOr<std::shared_ptr<GraphModel>> loaded = GraphModel::Load(TempPath(name), {10, 8});
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : nullptr;
  }
};

at::Tensor TrainLogits(GraphModel& model, const at::Tensor& x, uint64_t seed) {
  model.train();
  model.SetRandomSeed(seed);
  return model.forward(x).detach();
}

TEST_F(GraphRandomTest, TrainingDrawsAsPyTorchDoesAfterTheSameSeed) {
  std::map<std::string, at::Tensor> ref = ReadPythonTensors(TempPath("noisy_reference.pt"));
  for (const char* archive : {"noisy.pt2", "noisy_plain.pt2"}) {
    SCOPED_TRACE(archive);
    // A fresh model per seed: the forward updates the running statistics.
    for (int seed : {11, 12}) {
      std::shared_ptr<GraphModel> model = Load(archive);
      ASSERT_NE(model, nullptr);
      EXPECT_TRUE(at::allclose(TrainLogits(*model, ref["x"], seed),
                               ref[absl::StrCat(archive, " train", seed)], 1e-6, 1e-6))
          << "seed " << seed;
    }
  }
}

TEST_F(GraphRandomTest, SameSeedGivesTheSameMasksAndAnotherSeedOthers) {
  std::map<std::string, at::Tensor> ref = ReadPythonTensors(TempPath("noisy_reference.pt"));
  std::shared_ptr<GraphModel> model = Load("noisy.pt2");
  ASSERT_NE(model, nullptr);
  {
    torch::NoGradGuard no_grad;  // the running statistics move; the masks must not depend on them
    const at::Tensor a = TrainLogits(*model, ref["x"], 99);
    const at::Tensor b = TrainLogits(*model, ref["x"], 99);
    const at::Tensor c = TrainLogits(*model, ref["x"], 100);
    // Batch norm in training mode normalises with the batch's statistics, so only the
    // masks change a, b and c.
    EXPECT_TRUE(at::equal(a, b));
    EXPECT_FALSE(at::allclose(a, c));
  }
}

TEST_F(GraphRandomTest, EvaluationUsesRunningStatisticsWithoutDropoutAndLeavesBuffersAlone) {
  std::map<std::string, at::Tensor> ref = ReadPythonTensors(TempPath("noisy_reference.pt"));
  for (const char* archive : {"noisy.pt2", "noisy_plain.pt2"}) {
    SCOPED_TRACE(archive);
    std::shared_ptr<GraphModel> model = Load(archive);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->has_eval_program(), std::string(archive) == "noisy.pt2");
    std::map<std::string, at::Tensor> before;
    for (const auto& item : model->named_buffers()) before[item.key()] = item.value().clone();
    model->eval();
    torch::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(ref["x"]);
    EXPECT_TRUE(at::allclose(logits, ref["eval"], 1e-6, 1e-6))
        << (logits - ref["eval"]).abs().max();
    for (const auto& item : model->named_buffers()) {
      EXPECT_TRUE(at::equal(item.value(), before[item.key()]))
          << item.key() << " changed in evaluation";
    }
  }
}

}  // namespace
}  // namespace stoker::trainer
