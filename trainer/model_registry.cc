#include "trainer/model_registry.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainer/graph/graph_model.h"
#include "trainer/nn/builtin_models.h"

namespace stoker::trainer {

absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeModel(const std::string& name, int num_classes,
                                                           int image_size, bool fused_blocks,
                                                           bool fp8) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_classes must be >= 1, got ", num_classes));
  }
  if (absl::EndsWith(name, kExportedModelSuffix)) {
    absl::StatusOr<std::shared_ptr<GraphModel>> graph =
        GraphModel::Load(name, {num_classes, image_size, fused_blocks, fp8});
    if (!graph.ok()) return graph.status();
    return std::shared_ptr<ImageClassifier>(*std::move(graph));
  }
  return MakeBuiltinModel(name, num_classes, fused_blocks);
}

}  // namespace stoker::trainer
