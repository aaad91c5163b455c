// Test-only: a model with its optimizer and loss scaler, the state a checkpoint holds.
#ifndef STOKER_TRAINER_CHECKPOINT_TRAINING_RUN_TESTING_H_
#define STOKER_TRAINER_CHECKPOINT_TRAINING_RUN_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "trainer/checkpoint/training_state.h"

namespace stoker::testing {

struct TrainingRun {
  std::shared_ptr<trainer::ImageClassifier> model;
  std::unique_ptr<trainer::FusedOptimizer> optimizer;
  std::vector<std::string> names;  // the parameters', in the optimizer's order
  trainer::LossScaler scaler;
  trainer::TrainingStateRefs refs() {
    return trainer::TrainingStateRefs{model.get(), optimizer.get(), names, &scaler};
  }
};

// `model`'s parameters under AdamW (learning rate 0.01), with a loss scaler of `scaler`.
TrainingRun MakeTrainingRun(std::shared_ptr<trainer::ImageClassifier> model,
                            const trainer::LossScalerOptions& scaler);

}  // namespace stoker::testing

#endif  // STOKER_TRAINER_CHECKPOINT_TRAINING_RUN_TESTING_H_
