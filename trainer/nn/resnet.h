// torchvision's ResNet-18 and ResNet-50 in libtorch: the same architecture (BasicBlock /
// Bottleneck with the stride on the 3x3 conv, "ResNet v1.5"), the same initialisation and
// the same state-dict names, so weights move between Stoker and torchvision unchanged.
#ifndef STOKER_TRAINER_NN_RESNET_H_
#define STOKER_TRAINER_NN_RESNET_H_

#include <memory>

#include "trainer/nn/image_classifier.h"

namespace stoker::trainer {

// Each returns a freshly initialised model equal to `torchvision.models.resnet18(
// num_classes=num_classes)` (resp. resnet50): parameter and buffer names and their
// state-dict order are torchvision's ("conv1.weight", "bn1.running_mean",
// "layer1.0.downsample.0.weight", ..., "fc.bias"); convolutions get kaiming_normal_(fan_out,
// relu), batch norms weight 1 and bias 0, the classifier Linear's default init; the
// last BN of a block is not zero-initialised (zero_init_residual=False). Modules are built
// and initialised in torchvision's order, so after the same torch.manual_seed the weights
// equal torchvision's bit for bit. Input: float images [N, 3, H, W] (contiguous or
// channels_last, under autocast or not); output: logits [N, num_classes].
// With `fused_blocks`, batch norm + ReLU, batch norm + add + ReLU and the stem's max pool
// are the fused blocks of fused_blocks.h (same results within rounding on the GPU; the
// same ops on the CPU). Precondition: num_classes >= 1 (MakeBuiltinModel checks it).
// Thread-compatible, like any torch::nn::Module.
std::shared_ptr<ImageClassifier> MakeResNet18(int num_classes, bool fused_blocks = true);
std::shared_ptr<ImageClassifier> MakeResNet50(int num_classes, bool fused_blocks = true);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_RESNET_H_
