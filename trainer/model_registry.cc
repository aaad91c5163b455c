#include "trainer/model_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/nn/builtin_models.h"
#include "trainer/options.h"

namespace stoker::trainer {

absl::StatusOr<std::shared_ptr<ImageClassifier>> MakeModel(const std::string& name,
                                                           const GraphModelOptions& options) {
  if (options.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_classes must be >= 1, got ", options.num_classes));
  }
  if (IsExportedModel(name)) {
    absl::StatusOr<std::shared_ptr<GraphModel>> graph = GraphModel::Load(name, options);
    if (!graph.ok()) return graph.status();
    return std::shared_ptr<ImageClassifier>(*std::move(graph));
  }
  return MakeBuiltinModel(name, options.num_classes, options.fused_blocks);
}

}  // namespace stoker::trainer
