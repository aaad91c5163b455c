// The model a run trains, chosen by --model: a model built into Stoker by name
// ("small_cnn", "resnet18", "resnet50": trainer/nn/builtin_models.h), or the path of a
// torch.export archive ("m.pt2": a model brought from Python, trainer/graph/graph_model.h).
#ifndef STOKER_TRAINER_MODEL_REGISTRY_H_
#define STOKER_TRAINER_MODEL_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/nn/image_classifier.h"

namespace stoker::trainer {

// A name ending so is a torch.export archive to load.
inline constexpr char kExportedModelSuffix[] = ".pt2";

struct MakeModelOptions {
  int image_size = 0;        // the image side an exported model must take; 0: any
  bool fused_blocks = true;  // the fused blocks, built-in and exported models
  bool fp8 = false;          // exported models: Note [FP8 linear layers in a program]
};

// Builds the named model with freshly initialised weights (from torch's global generator;
// seed it first for reproducible weights), or loads the exported model at that path with
// the archive's weights, checking it against `num_classes` and `image_size` (0: any).
// Built-in ResNets, and the batch norms and max pools of exported models, use the fused
// blocks (trainer/nn/fused_blocks.h) unless `options.fused_blocks` is false. InvalidArgument for
// an unknown name or an archive Stoker refuses (the message says why).
absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeModel(const std::string& name, int num_classes,
                                                           const MakeModelOptions& options = {});

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_MODEL_REGISTRY_H_
