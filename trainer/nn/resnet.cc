// ResNet as torchvision.models.resnet builds it (see resnet.h).
#include "trainer/nn/resnet.h"

#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <utility>
#include <vector>

#include "trainer/nn/fused_blocks.h"

namespace stoker::trainer {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

nn::Conv2d Conv3x3(int64_t in_planes, int64_t out_planes, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in_planes, out_planes, 3).stride(stride).padding(1).bias(false));
}

nn::Conv2d Conv1x1(int64_t in_planes, int64_t out_planes, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in_planes, out_planes, 1).stride(stride).bias(false));
}

// A residual block; `downsample` (conv1x1 + BN, or empty) maps the input to the output's
// shape when they differ.
class ResidualBlock : public nn::Module {
 public:
  explicit ResidualBlock(bool fused) : fused_(fused) {}
  virtual torch::Tensor forward(torch::Tensor x) = 0;

 protected:
  // Registers a non-empty `downsample` as the block's last child; call it at the end of
  // the constructor (Note [Construction order]).
  void RegisterDownsample(nn::Sequential downsample) {
    if (downsample.is_empty()) return;
    downsample_ = register_module("downsample", downsample);
    downsample_conv_ = std::dynamic_pointer_cast<nn::Conv2dImpl>(downsample_->ptr(0));
    downsample_bn_ = std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(downsample_->ptr(1));
  }

  // relu(bn(out) + x), x through the downsample where there is one: how every block ends.
  torch::Tensor AddShortcut(nn::BatchNorm2d& bn, const torch::Tensor& out, const torch::Tensor& x) {
    return BatchNormReLU(*bn, out, downsample_.is_empty() ? x : Downsample(x), fused_);
  }

  // downsample(x): the 1x1 convolution, then its batch norm as a fused block.
  torch::Tensor Downsample(const torch::Tensor& x) {
    return BatchNorm(*downsample_bn_, downsample_conv_->forward(x), fused_);
  }

  // relu(bn(x)).
  torch::Tensor NormReLU(nn::BatchNorm2d& bn, const torch::Tensor& x) {
    return BatchNormReLU(*bn, x, /*residual=*/{}, fused_);
  }

 private:
  const bool fused_;  // Note [Fused blocks]
  nn::Sequential downsample_{nullptr};
  std::shared_ptr<nn::Conv2dImpl> downsample_conv_;  // downsample_'s children
  std::shared_ptr<nn::BatchNorm2dImpl> downsample_bn_;
};

// Note [Construction order]: torchvision builds a layer's downsample before the block that
// owns it but registers it as the block's last child, and every Conv2d / Linear draws its
// default init from the global generator when built. Building in the same order, then
// re-initialising convolutions in module pre-order (as torchvision's loop over
// self.modules() does), consumes the generator exactly as Python does.

// torchvision.models.resnet.BasicBlock (expansion 1).
class BasicBlock final : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, nn::Sequential downsample,
             bool fused)
      : ResidualBlock(fused),
        conv1_(register_module("conv1", Conv3x3(in_planes, planes, stride))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", Conv3x3(planes, planes, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
    RegisterDownsample(std::move(downsample));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = NormReLU(bn1_, conv1_->forward(x));
    return AddShortcut(bn2_, conv2_->forward(out), x);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
};

// torchvision.models.resnet.Bottleneck (expansion 4, stride on conv2: ResNet v1.5).
class Bottleneck final : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 4;

  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, nn::Sequential downsample,
             bool fused)
      : ResidualBlock(fused),
        conv1_(register_module("conv1", Conv1x1(in_planes, planes, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", Conv3x3(planes, planes, stride))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
        conv3_(register_module("conv3", Conv1x1(planes, planes * kExpansion, 1))),
        bn3_(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))) {
    RegisterDownsample(std::move(downsample));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = NormReLU(bn1_, conv1_->forward(x));
    out = NormReLU(bn2_, conv2_->forward(out));
    return AddShortcut(bn3_, conv3_->forward(out), x);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv3_;
  nn::BatchNorm2d bn3_;
};

// torchvision.models.resnet.ResNet with groups=1, width_per_group=64, no dilation.
template <typename Block>
class ResNet final : public ImageClassifier {
 public:
  ResNet(const std::vector<int64_t>& blocks_per_layer, int num_classes, bool fused)
      : fused_(fused),
        conv1_(register_module(
            "conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))) {
    const int64_t planes[] = {64, 128, 256, 512};
    for (int i = 0; i < 4; ++i) {
      MakeLayer(std::to_string(i + 1), planes[i], blocks_per_layer[i], i == 0 ? 1 : 2);
    }
    fc_ = register_module("fc", nn::Linear(512 * Block::kExpansion, num_classes));

    torch::NoGradGuard no_grad;
    for (const std::shared_ptr<nn::Module>& module : modules(/*include_self=*/false)) {
      if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(module.get())) {
        nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = dynamic_cast<nn::BatchNorm2dImpl*>(module.get())) {
        nn::init::ones_(bn->weight);
        nn::init::zeros_(bn->bias);
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = BatchNormReLU(*bn1_, conv1_->forward(x), /*residual=*/{}, fused_);
    x = MaxPool2d(x, /*kernel=*/3, /*stride=*/2, /*padding=*/1, fused_);
    for (const auto& layer : layers_) {
      for (const std::shared_ptr<ResidualBlock>& block : layer) x = block->forward(x);
    }
    x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
    return fc_->forward(x);
  }

 private:
  // Appends "layer<name>": `blocks` blocks, the first with `stride` (see Note [Construction
  // order]).
  void MakeLayer(const std::string& name, int64_t planes, int64_t blocks, int64_t stride) {
    nn::ModuleList layer;
    std::vector<std::shared_ptr<ResidualBlock>> typed;
    const int64_t out_planes = planes * Block::kExpansion;
    nn::Sequential downsample{nullptr};
    if (stride != 1 || in_planes_ != out_planes) {
      downsample =
          nn::Sequential(Conv1x1(in_planes_, out_planes, stride), nn::BatchNorm2d(out_planes));
    }
    typed.push_back(std::make_shared<Block>(in_planes_, planes, stride, downsample, fused_));
    in_planes_ = out_planes;
    for (int64_t i = 1; i < blocks; ++i) {
      typed.push_back(
          std::make_shared<Block>(in_planes_, planes, 1, nn::Sequential(nullptr), fused_));
    }
    for (const auto& block : typed) layer->push_back(block);
    register_module("layer" + name, layer);
    layers_.push_back(std::move(typed));
  }

  const bool fused_;  // Note [Fused blocks]
  int64_t in_planes_ = 64;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  std::vector<std::vector<std::shared_ptr<ResidualBlock>>> layers_;
  nn::Linear fc_{nullptr};
};

}  // namespace

std::shared_ptr<ImageClassifier> MakeResNet18(int num_classes, bool fused_blocks) {
  return std::make_shared<ResNet<BasicBlock>>(std::vector<int64_t>{2, 2, 2, 2}, num_classes,
                                              fused_blocks);
}

std::shared_ptr<ImageClassifier> MakeResNet50(int num_classes, bool fused_blocks) {
  return std::make_shared<ResNet<Bottleneck>>(std::vector<int64_t>{3, 4, 6, 3}, num_classes,
                                              fused_blocks);
}

}  // namespace stoker::trainer
