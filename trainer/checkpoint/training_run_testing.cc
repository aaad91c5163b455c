#include "trainer/checkpoint/training_run_testing.h"

#include <utility>

namespace stoker::testing {

TrainingRun MakeTrainingRun(std::shared_ptr<trainer::ImageClassifier> model,
                            const trainer::LossScalerOptions& scaler) {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  trainer::OptimizerOptions options;
  options.kind = trainer::OptimizerKind::kAdamW;
  options.learning_rate = 0.01;
  return TrainingRun{std::move(model), std::move(*trainer::FusedOptimizer::Create(params, options)),
                     std::move(names), std::move(*trainer::LossScaler::Create(scaler))};
}

}  // namespace stoker::testing
