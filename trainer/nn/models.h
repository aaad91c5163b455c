// The image classifiers Stoker trains, chosen by name: "small_cnn" (a few seconds an
// epoch on a CPU; the demo and the CPU tests), "resnet18" and "resnet50" (torchvision's
// architectures and parameter names).
#ifndef STOKER_TRAINER_NN_MODELS_H_
#define STOKER_TRAINER_NN_MODELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/nn/image_classifier.h"

namespace stoker::trainer {

// The names MakeModel accepts.
std::vector<std::string> ModelNames();

// Builds the named model with freshly initialised weights (from torch's global generator;
// seed it first for reproducible weights), with or without the fused blocks
// (trainer/nn/fused_blocks.h). InvalidArgument for an unknown name.
absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeModel(const std::string& name,
                                                           int num_classes,
                                                           bool fused_blocks = true);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_MODELS_H_
