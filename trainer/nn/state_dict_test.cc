// Tests that StateDictItems follows Python's state_dict order and that PickleStateDict's
// bytes load in Python's torch.load (weights_only=True) with every value intact.
#include "trainer/nn/state_dict.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/python_runner.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

namespace nn = torch::nn;

// conv (no bias) -> bn -> head(linear, bn1d): parameters and buffers on two levels.
struct TinyNet : nn::Module {
  TinyNet() {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(3, 4, 3).bias(false)));
    bn = register_module("bn", nn::BatchNorm2d(4));
    head = register_module("head", nn::Sequential(nn::Linear(4, 2), nn::BatchNorm1d(2)));
  }
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::Sequential head{nullptr};
};

std::vector<std::string> Names(const std::vector<std::pair<std::string, torch::Tensor>>& items) {
  std::vector<std::string> names;
  for (const auto& item : items) names.push_back(item.first);
  return names;
}

TEST(StateDictTest, ItemsFollowPythonOrderOfOwnParametersThenOwnBuffersPerModule) {
  auto net = std::make_shared<TinyNet>();
  const std::vector<std::string> expected = {"conv.weight",
                                             "bn.weight",
                                             "bn.bias",
                                             "bn.running_mean",
                                             "bn.running_var",
                                             "bn.num_batches_tracked",
                                             "head.0.weight",
                                             "head.0.bias",
                                             "head.1.weight",
                                             "head.1.bias",
                                             "head.1.running_mean",
                                             "head.1.running_var",
                                             "head.1.num_batches_tracked"};
  EXPECT_EQ(Names(StateDictItems(*net)), expected);
}

TEST(StateDictTest, ItemsAliasTheModuleTensors) {
  auto net = std::make_shared<TinyNet>();
  for (const auto& [name, tensor] : StateDictItems(*net)) {
    if (name == "bn.running_mean") {
      EXPECT_TRUE(tensor.is_same(net->bn->running_mean));
    }
  }
}

TEST(StateDictTest, PickleLoadsInPythonTorchLoadWithEveryValueExact) {
  torch::manual_seed(7);
  auto net = std::make_shared<TinyNet>();
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : StateDictItems(*net)) {
      if (tensor.is_floating_point()) tensor.uniform_(-2, 2);
    }
    net->bn->num_batches_tracked.fill_(41);
    // A strided (channels_last) tensor must keep its values through the pickle.
    net->conv->weight.set_data(net->conv->weight.contiguous(at::MemoryFormat::ChannelsLast));
  }
  absl::StatusOr<std::string> bytes = PickleStateDict(*net);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tiny.pt");
  {
    std::ofstream out(path, std::ios::binary);
    out << *bytes;
    ASSERT_TRUE(out.good());
  }

  // One line per entry: name dtype shape values (floats in hex, integers in decimal).
  absl::StatusOr<std::string> printed = testing::RunPython(R"py(
import sys, torch
sd = torch.load(sys.argv[1], weights_only=True)
assert isinstance(sd, dict), type(sd)
for name, t in sd.items():
    vals = [float(v).hex() if t.is_floating_point() else str(int(v)) for v in t.flatten().tolist()]
    print(name, str(t.dtype), "x".join(str(s) for s in t.shape), ",".join(vals))
)py",
                                                           {path});
  ASSERT_TRUE(printed.ok()) << printed.status();

  const std::vector<std::string> lines = absl::StrSplit(*printed, '\n', absl::SkipWhitespace());
  const auto items = StateDictItems(*net);
  ASSERT_EQ(lines.size(), items.size()) << *printed;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::vector<std::string> fields = absl::StrSplit(lines[i], ' ');
    ASSERT_EQ(fields.size(), 4u) << lines[i];
    const auto& [name, tensor] = items[i];
    EXPECT_EQ(fields[0], name);
    EXPECT_EQ(fields[1], tensor.is_floating_point() ? "torch.float32" : "torch.int64") << name;
    std::vector<std::string> dims;
    for (int64_t d : tensor.sizes()) dims.push_back(std::to_string(d));
    EXPECT_EQ(fields[2], absl::StrJoin(dims, "x")) << name;
    const std::vector<std::string> values = absl::StrSplit(fields[3], ',');
    const torch::Tensor flat = tensor.contiguous().flatten();
    ASSERT_EQ(static_cast<int64_t>(values.size()), flat.numel()) << name;
    for (int64_t j = 0; j < flat.numel(); ++j) {
      if (tensor.is_floating_point()) {
        EXPECT_EQ(std::strtod(values[j].c_str(), nullptr), flat[j].item<float>())
            << name << "[" << j << "]";
      } else {
        EXPECT_EQ(std::stoll(values[j]), flat[j].item<int64_t>()) << name << "[" << j << "]";
      }
    }
  }
}

}  // namespace
}  // namespace stoker::trainer
