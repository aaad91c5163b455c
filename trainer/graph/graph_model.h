// GraphModel: an image classifier written in Python and exported with torch.export, run
// by the trainer op by op (trainer/graph/graph_program.h). Its parameters and buffers are
// registered in the module under their state-dict names ("layer1.0.bn1.weight", in
// submodules "layer1" -> "0" -> "bn1"), so buckets, the optimizer, checkpoints, resume,
// validation and --export treat it as any built-in model, and the exported weights load
// into the user's Python class with load_state_dict(strict=True). The tensor constants that
// torch.export lifted into the archive are kept beside the module's tensors: they move with
// the model (`to`), and are never trained, checkpointed or exported.
#ifndef STOKER_TRAINER_GRAPH_GRAPH_MODEL_H_
#define STOKER_TRAINER_GRAPH_GRAPH_MODEL_H_

#include <ATen/core/Generator.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/export_archive.h"
#include "trainer/graph/graph_program.h"
#include "trainer/nn/image_classifier.h"

namespace stoker::trainer {

struct GraphModelOptions {
  int num_classes = 0;           // the logits width the program must have; 0: the program's
  int image_size = 0;            // the image side the program must take; 0: the program's
  bool fused_blocks = true;      // GraphProgramOptions::fused_blocks
  bool pointwise_fusion = true;  // GraphProgramOptions::pointwise_fusion
  bool fp8 = false;              // GraphProgramOptions::fp8, for the training program only
  Fp8Recipe fp8_recipe;          // GraphProgramOptions::fp8_recipe
};

// train() runs the training program, eval() the evaluation program (or the training
// program as Note [Evaluation from the training program] says). Thread-compatible.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<GraphModel> model, GraphModel::Load("m.pt2", {10, 32}));
//   at::Tensor logits = model->forward(images);
class GraphModel final : public ImageClassifier {
 public:
  // Reads and checks the archive (trainer/graph/export_archive.h) and builds both programs
  // with the archive's weights: ReadExportArchive's errors, then FromArchive's.
  static absl::StatusOr<std::shared_ptr<GraphModel>> Load(const std::string& path,
                                                          const GraphModelOptions& options);

  // Builds both programs of `archive` with its weights. Every refusal (the file, or the
  // node, its operator and why) is tagged kExitUsage: Note [Untrusted model files]
  // (trainer/nn/model_file.h); a malformed JSON field of the program is refused naming it.
  static absl::StatusOr<std::shared_ptr<GraphModel>> FromArchive(const ExportArchive& archive,
                                                                 const GraphModelOptions& options);

  torch::Tensor forward(torch::Tensor images) override;

  // Random ops (dropout, stochastic depth) of the following forward passes draw from
  // generators seeded with `seed`. The training loop calls it before each optimizer step
  // with a seed mixed from (run seed, rank, step), so a resumed run draws the same masks.
  void SetRandomSeed(uint64_t seed) override;
  std::vector<at::Generator> DeviceGenerators() override;
  // The training program's (GraphProgram::fp8_states); `to` places them on its device.
  std::vector<c10::intrusive_ptr<Fp8LinearState>> Fp8States() override;

  // Moves the parameters and buffers as torch::nn::Module does, and the tensor constants to
  // `device` (keeping their dtype: they are indices and masks as often as values); makes the
  // FP8 scaling state on `device`, or moves it there (Fp8LinearState::PlaceOn), in fp32.
  using torch::nn::Module::to;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  int num_classes() const { return train_->num_classes(); }
  int image_size() const { return train_->image_size(); }
  bool has_eval_program() const { return has_eval_program_; }
  const GraphProgram& train_program() const { return *train_; }

 private:
  GraphModel() = default;

  // FromArchive's work, which may throw nlohmann::json's exceptions on a malformed field.
  static absl::StatusOr<std::shared_ptr<GraphModel>> Build(const ExportArchive& archive,
                                                           const GraphModelOptions& options);

  // The generator of `device`, made on first use and seeded with seed_.
  at::Generator& GeneratorFor(const c10::Device& device);

  // Moves the tensor constants to `device`, in place (the programs hold the same tensors).
  void MoveConstants(torch::Device device, bool non_blocking);
  // Note [FP8 scaling state in checkpoints]: the state exists, on `device`, before a
  // checkpoint is restored into it.
  void PlaceFp8States(torch::Device device);

  std::vector<at::Tensor> constants_;  // both programs' tensor constants
  std::unique_ptr<GraphProgram> train_;
  std::unique_ptr<GraphProgram> eval_;
  bool has_eval_program_ = false;
  uint64_t seed_ = 0;
  std::map<std::string, at::Generator> generators_;  // by device ("cpu", "cuda:0")
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_MODEL_H_
