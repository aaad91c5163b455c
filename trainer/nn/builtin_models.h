// The image classifiers built into Stoker, chosen by name: "small_cnn" (a few seconds an
// epoch on a CPU; the demo and the CPU tests), "resnet18" and "resnet50" (torchvision's
// architectures and parameter names). The run's choice between these and a model brought
// from Python (--model) is trainer/model_registry.h.
#ifndef STOKER_TRAINER_NN_BUILTIN_MODELS_H_
#define STOKER_TRAINER_NN_BUILTIN_MODELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/nn/image_classifier.h"

namespace stoker::trainer {

// The names MakeBuiltinModel accepts.
std::vector<std::string> BuiltinModelNames();

// Builds the named model with freshly initialised weights (from torch's global generator;
// seed it first for reproducible weights). The ResNets use the fused blocks
// (trainer/nn/fused_blocks.h) unless `fused_blocks` is false. InvalidArgument for an
// unknown name (the message lists the known ones) or num_classes < 1.
absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeBuiltinModel(const std::string& name,
                                                                  int num_classes,
                                                                  bool fused_blocks = true);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_BUILTIN_MODELS_H_
