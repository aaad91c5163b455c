// Tests that MakeResNet18/50 are torchvision's resnet18/resnet50: parameter counts, state-dict
// names, shapes and order, weights after the same seed, and logits for the same weights and
// input (torchvision runs in $STOKER_PYTHON; the tests fail if it lacks torchvision).
#include "trainer/nn/resnet.h"

#include <ATen/autocast_mode.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/python_runner.h"
#include "gtest/gtest.h"
#include "trainer/nn/state_dict.h"

namespace stoker::trainer {
namespace {

struct Arch {
  const char* name;  // torchvision.models.<name>
  std::shared_ptr<ImageClassifier> (*make)(int num_classes, bool fused_blocks);
};

const Arch kArchs[] = {{"resnet18", &MakeResNet18}, {"resnet50", &MakeResNet50}};

int64_t ParameterCount(const torch::nn::Module& model) {
  int64_t count = 0;
  for (const torch::Tensor& p : model.parameters()) count += p.numel();
  return count;
}

std::string Shape(const torch::Tensor& t) {
  std::vector<std::string> dims;
  for (int64_t d : t.sizes()) dims.push_back(std::to_string(d));
  return absl::StrJoin(dims, "x");
}

using testing::TempPath;

void WriteFile(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), size);
  ASSERT_TRUE(out.good()) << path;
}

// Writes the model's state dict where Python's torch.load can read it.
void WriteStateDict(const torch::nn::Module& model, const std::string& path) {
  absl::StatusOr<std::string> bytes = PickleStateDict(model);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  WriteFile(path, bytes->data(), bytes->size());
}

// Largest |a - b| over all elements, and the largest |b|.
std::pair<double, double> MaxDiffAndScale(const torch::Tensor& a, const torch::Tensor& b) {
  const double diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
  return {diff, b.to(torch::kDouble).abs().max().item<double>()};
}

TEST(ResNetTest, ParameterCountsMatchTorchvisionFor1000Classes) {
  EXPECT_EQ(ParameterCount(*MakeResNet18(1000)), 11689512);
  EXPECT_EQ(ParameterCount(*MakeResNet50(1000)), 25557032);
}

TEST(ResNetTest, StateDictNamesShapesAndOrderEqualTorchvision) {
  absl::StatusOr<std::string> printed = testing::RunPython(R"py(
import sys, torchvision
for arch in sys.argv[1:]:
    for k, v in getattr(torchvision.models, arch)().state_dict().items():
        print(arch, k, "x".join(str(s) for s in v.shape))
)py",
                                                           {"resnet18", "resnet50"});
  ASSERT_TRUE(printed.ok()) << printed.status();
  std::vector<std::string> expected = absl::StrSplit(*printed, '\n', absl::SkipWhitespace());

  std::vector<std::string> actual;
  for (const Arch& arch : kArchs) {
    for (const auto& [name, tensor] : StateDictItems(*arch.make(1000, /*fused_blocks=*/true))) {
      actual.push_back(absl::StrCat(arch.name, " ", name, " ", Shape(tensor)));
    }
  }
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_EQ(actual, expected);
  // libtorch's BatchNorm carries num_batches_tracked as torchvision's does.
  EXPECT_NE(std::find(actual.begin(), actual.end(), "resnet18 bn1.num_batches_tracked "),
            actual.end());
}

TEST(ResNetTest, SameSeedGivesTorchvisionWeightsBitForBit) {
  constexpr int kSeed = 1234;
  constexpr int kClasses = 10;
  std::vector<std::string> args = {std::to_string(kSeed), std::to_string(kClasses)};
  for (const Arch& arch : kArchs) {
    torch::manual_seed(kSeed);
    const std::string path = TempPath(absl::StrCat(arch.name, "_seeded.pt"));
    WriteStateDict(*arch.make(kClasses, /*fused_blocks=*/true), path);
    args.insert(args.end(), {arch.name, path});
  }
  absl::StatusOr<std::string> printed = testing::RunPython(R"py(
import sys, torch, torchvision
seed, classes, rest = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
for arch, path in zip(rest[::2], rest[1::2]):
    torch.manual_seed(seed)
    ref = getattr(torchvision.models, arch)(num_classes=classes).state_dict()
    got = torch.load(path, weights_only=True)
    assert list(got) == list(ref), arch + ": names differ"
    bad = [k for k in ref if not torch.equal(got[k], ref[k])]
    print(arch, "mismatched:", len(bad), " ".join(bad[:8]))
)py",
                                                           args);
  ASSERT_TRUE(printed.ok()) << printed.status();
  EXPECT_EQ(*printed, "resnet18 mismatched: 0 \nresnet50 mismatched: 0 \n");
}

// Loads the C++ models' weights (BN statistics and affine parameters randomised so every
// tensor matters) into torchvision, runs the same input in eval and in train mode, and
// compares the logits in fp32.
TEST(ResNetTest, TorchvisionGivesTheSameLogitsForTheExportedWeights) {
  constexpr int64_t kBatch = 2, kSide = 64, kClasses = 10;
  torch::manual_seed(99);
  const torch::Tensor input = torch::randn({kBatch, 3, kSide, kSide});
  const std::string input_path = TempPath("input.f32");
  WriteFile(input_path, input.data_ptr<float>(), input.numel() * sizeof(float));
  std::vector<std::string> args = {input_path, std::to_string(kBatch), std::to_string(kSide),
                                   std::to_string(kClasses)};
  std::vector<torch::Tensor> ours;  // per arch: eval logits, train logits
  for (const Arch& arch : kArchs) {
    const std::shared_ptr<ImageClassifier> model = arch.make(kClasses, /*fused_blocks=*/true);
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, tensor] : StateDictItems(*model)) {
        if (absl::EndsWith(name, "running_var")) tensor.uniform_(0.5, 1.5);
        if (absl::EndsWith(name, "running_mean")) tensor.uniform_(-0.2, 0.2);
        if (absl::StrContains(name, "bn") || absl::StrContains(name, "downsample.1")) {
          if (absl::EndsWith(name, ".weight")) tensor.uniform_(0.5, 1.5);
          if (absl::EndsWith(name, ".bias")) tensor.uniform_(-0.2, 0.2);
        }
      }
    }
    const std::string weights_path = TempPath(absl::StrCat(arch.name, "_weights.pt"));
    WriteStateDict(*model, weights_path);
    args.insert(args.end(), {arch.name, weights_path});

    model->eval();
    {
      torch::NoGradGuard no_grad;
      ours.push_back(model->forward(input));
    }
    ASSERT_EQ(ours.back().sizes(), (std::vector<int64_t>{kBatch, kClasses}));
    model->train();
    ours.push_back(model->forward(input).detach());
  }

  absl::StatusOr<std::string> printed = testing::RunPython(R"py(
import sys, torch, torchvision
inputs, n, side, classes = sys.argv[1], *map(int, sys.argv[2:5])
with open(inputs, "rb") as f:
    x = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(n, 3, side, side)
for arch, weights in zip(sys.argv[5::2], sys.argv[6::2]):
    model = getattr(torchvision.models, arch)(num_classes=classes)
    model.load_state_dict(torch.load(weights, weights_only=True), strict=True)
    model.eval()
    with torch.no_grad():
        y_eval = model(x)
    model.train()
    y_train = model(x).detach()
    for y in (y_eval, y_train):
        print(" ".join(float(v).hex() for v in y.flatten().tolist()))
)py",
                                                           args);
  ASSERT_TRUE(printed.ok()) << printed.status();
  const std::vector<std::string> lines = absl::StrSplit(*printed, '\n', absl::SkipWhitespace());
  ASSERT_EQ(lines.size(), ours.size()) << *printed;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string what = absl::StrCat(kArchs[i / 2].name, i % 2 == 0 ? " eval" : " train");
    SCOPED_TRACE(what);
    std::vector<float> values;
    for (absl::string_view v : absl::StrSplit(lines[i], ' ')) {
      values.push_back(std::strtof(std::string(v).c_str(), nullptr));
    }
    ASSERT_EQ(static_cast<int64_t>(values.size()), kBatch * kClasses);
    const torch::Tensor theirs = torch::tensor(values).reshape({kBatch, kClasses});
    const auto [diff, scale] = MaxDiffAndScale(ours[i], theirs);
    EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << "largest |logit| " << scale;
    std::cerr << what << ": max |diff| " << diff << ", max |logit| " << scale << "\n";
  }
}

TEST(ResNetTest, ChannelsLastInputGivesTheSameLogits) {
  torch::manual_seed(5);
  for (const Arch& arch : kArchs) {
    SCOPED_TRACE(arch.name);
    const std::shared_ptr<ImageClassifier> model = arch.make(10, /*fused_blocks=*/true);
    model->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor input = torch::randn({2, 3, 64, 64});
    const torch::Tensor contiguous = model->forward(input);
    const torch::Tensor channels_last =
        model->forward(input.contiguous(at::MemoryFormat::ChannelsLast));
    const auto [diff, scale] = MaxDiffAndScale(channels_last, contiguous);
    EXPECT_LE(diff, 1e-4 * std::max(1.0, scale));
  }
}

TEST(ResNetTest, AutocastForwardGivesLowPrecisionLogitsCloseToFloat32) {
  torch::manual_seed(6);
  const std::shared_ptr<ImageClassifier> model = MakeResNet18(10);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor input = torch::randn({2, 3, 64, 64});
  const torch::Tensor reference = model->forward(input);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const torch::Tensor mixed = model->forward(input);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(mixed.scalar_type(), at::kBFloat16);
  const auto [diff, scale] = MaxDiffAndScale(mixed, reference);
  EXPECT_LE(diff, 0.05 * std::max(1.0, scale));
  std::cerr << "bf16 autocast: max |diff| " << diff << ", max |logit| " << scale << "\n";
}

}  // namespace
}  // namespace stoker::trainer
