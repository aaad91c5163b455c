// The model a run trains, chosen by --model: a model built into Stoker by name
// ("small_cnn", "resnet18", "resnet50": trainer/nn/builtin_models.h), or the path of a
// torch.export archive ("m.pt2": a model brought from Python, trainer/graph/graph_model.h).
#ifndef STOKER_TRAINER_MODEL_REGISTRY_H_
#define STOKER_TRAINER_MODEL_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/graph/graph_model.h"
#include "trainer/nn/image_classifier.h"

namespace stoker::trainer {

// Builds the named model with freshly initialised weights (from torch's global generator;
// seed it first for reproducible weights), or loads the exported model at that path
// (IsExportedModel) with the archive's weights and `options`. A built-in model takes
// `options.num_classes` and `options.fused_blocks` (its ResNets' fused blocks,
// trainer/nn/fused_blocks.h). InvalidArgument for an unknown name or an archive Stoker
// refuses (the message says why).
absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeModel(const std::string& name,
                                                           const GraphModelOptions& options);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_MODEL_REGISTRY_H_
