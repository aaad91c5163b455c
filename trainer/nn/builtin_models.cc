#include "trainer/nn/builtin_models.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/torch_status.h"
#include "trainer/nn/fused_blocks.h"
#include "trainer/nn/resnet.h"

namespace stoker::trainer {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

// conv3x3 - BN - ReLU, three times with stride 2, global average pool, linear head.
class SmallCnn final : public ImageClassifier {
 public:
  explicit SmallCnn(int num_classes) {
    const int widths[] = {3, 16, 32, 64};
    for (int i = 0; i < 3; ++i) {
      convs_.push_back(register_module(
          absl::StrCat("conv", i + 1),
          nn::Conv2d(
              nn::Conv2dOptions(widths[i], widths[i + 1], 3).stride(2).padding(1).bias(false))));
      bns_.push_back(register_module(absl::StrCat("bn", i + 1), nn::BatchNorm2d(widths[i + 1])));
    }
    fc_ = register_module("fc", nn::Linear(widths[3], num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    for (size_t i = 0; i < convs_.size(); ++i)
      x = F::relu(BatchNorm(*bns_[i], convs_[i]->forward(x), /*fused=*/false));
    x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
    return fc_->forward(x);
  }

 private:
  std::vector<nn::Conv2d> convs_;
  std::vector<nn::BatchNorm2d> bns_;
  nn::Linear fc_{nullptr};
};

}  // namespace

std::vector<std::string> BuiltinModelNames() { return {"small_cnn", "resnet18", "resnet50"}; }

absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeBuiltinModel(const std::string& name,
                                                                  int num_classes,
                                                                  bool fused_blocks) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_classes must be >= 1, got ", num_classes));
  }
  using Model = absl::StatusOr<std::shared_ptr<ImageClassifier>>;
  return TorchCall(absl::StrCat("building model ", name), [&]() -> Model {
    if (name == "small_cnn") return std::make_shared<SmallCnn>(num_classes);
    if (name == "resnet18") return MakeResNet18(num_classes, fused_blocks);
    if (name == "resnet50") return MakeResNet50(num_classes, fused_blocks);
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: unknown model '", name, "'; known: ", absl::StrJoin(BuiltinModelNames(), ", ")));
  });
}

}  // namespace stoker::trainer
