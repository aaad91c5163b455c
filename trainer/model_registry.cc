#include "trainer/model_registry.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainer/graph/graph_model.h"
#include "trainer/nn/builtin_models.h"

namespace stoker::trainer {

absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeModel(const std::string& name, int num_classes,
                                                           const MakeModelOptions& options) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_classes must be >= 1, got ", num_classes));
  }
  if (absl::EndsWith(name, kExportedModelSuffix)) {
    GraphModelOptions graph_options;
    graph_options.num_classes = num_classes;
    graph_options.image_size = options.image_size;
    graph_options.fused_blocks = options.fused_blocks;
    graph_options.fp8 = options.fp8;
    absl::StatusOr<std::shared_ptr<GraphModel>> graph = GraphModel::Load(name, graph_options);
    if (!graph.ok()) return graph.status();
    return std::shared_ptr<ImageClassifier>(*std::move(graph));
  }
  return MakeBuiltinModel(name, num_classes, options.fused_blocks);
}

}  // namespace stoker::trainer
