// GraphProgram: one torch.export program (its serialised graph_module) turned, once at
// load, into a list of calls that run op by op through c10::Dispatcher, so that autograd,
// autocast and every ATen kernel apply as in eager PyTorch. No Python runs. Build is a
// pipeline of the package's stages: the signature checked (graph_signature.h), its values
// given slots (buffer_plan.h), then per node: read (graph_node.h), its operator resolved
// (graph_schema.h), its arguments and outputs converted (graph_arguments.h); last the
// fused-block rewrite (graph_fusion.h).
#ifndef STOKER_TRAINER_GRAPH_GRAPH_PROGRAM_H_
#define STOKER_TRAINER_GRAPH_GRAPH_PROGRAM_H_

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/buffer_plan.h"
#include "trainer/graph/graph_call.h"
#include "trainer/graph/graph_fusion.h"
#include "trainer/graph/graph_signature.h"

namespace stoker::trainer {

struct GraphProgramOptions {
  // Where errors point: "--model=m.pt2 (train program)".
  std::string where;
  // Logits width the output must have; 0 takes the program's.
  int num_classes = 0;
  // Image side the input must have; 0 takes the program's.
  int image_size = 0;
  // Run a training program as the evaluation one (a plain torch.export.save archive has no
  // other): Note [Evaluation from the training program].
  bool eval_from_training = false;
  // Rewrite batch norm + (add +) ReLU and max pooling into fused blocks: Note [Fused blocks
  // in a program] (trainer/graph/graph_fusion.h).
  bool fused_blocks = true;
  // With fused_blocks, rewrite chains of elementwise calls into generated kernels: Note
  // [Pointwise regions] (trainer/graph/pointwise_region.h).
  bool pointwise_fusion = true;
  // --precision=fp8: Note [FP8 linear layers in a program] (trainer/graph/graph_fp8.h).
  bool fp8 = false;
  // With fp8: the layers' delayed scaling (--fp8_amax_history).
  Fp8Recipe fp8_recipe;
};

// Built once, run many times. Thread-compatible: one Run at a time.
//
//   ASSIGN_OR_RETURN(auto program, GraphProgram::Build(graph_module, state, options));
//   at::Tensor logits = program->Run(images, &generator);  // throws c10::Error
class GraphProgram {
 public:
  // Checks and converts `graph_module` (the "graph_module" of models/<name>.json). The
  // refusals, each InvalidArgument "<where>: node <name> (<op>): <reason>" or
  // "<where>: <what> ...": an operator outside ATen (custom or Python ops), a higher-order
  // operator (control flow: cond, while_loop, map, ...), a random op without a generator
  // argument, an argument kind the runner does not convert, an input that is not one NCHW
  // image batch (with 3 channels, a dynamic batch dimension and static height and width),
  // an output that is not one [batch, classes] logits tensor, and a parameter or buffer
  // that `state` lacks. A field of another JSON type than the schema's throws
  // nlohmann::json's exception (GraphModel::FromArchive turns it into a refusal); a field
  // that is missing reads as null, never an assertion.
  static absl::StatusOr<std::unique_ptr<GraphProgram>> Build(const nlohmann::json& graph_module,
                                                             const GraphState& state,
                                                             const GraphProgramOptions& options);

  // Runs the program on `images` ([N, 3, H, W] float, any memory format) and returns the
  // logits. Random ops draw from `generator` (of the images' device); device arguments
  // of the graph are the images' device. Buffer mutations are applied to the bound
  // buffers. Throws c10::Error (callers wrap it in TorchCall) on a kernel failure or an
  // image batch of the wrong shape.
  at::Tensor Run(const at::Tensor& images, at::Generator* generator);

  ~GraphProgram();
  GraphProgram(const GraphProgram&) = delete;
  GraphProgram& operator=(const GraphProgram&) = delete;

  int num_classes() const { return num_classes_; }
  int image_size() const { return image_size_; }
  // The distinct operators the program calls ("aten::conv2d", ...), for reports.
  std::vector<std::string> operators() const;
  // The patterns rewritten into fused blocks (all zero with fused_blocks off).
  const FusedBlockCounts& fused_blocks() const { return fused_blocks_; }
  // The pointwise regions of its kPointwise calls, in program order (owned by the program).
  std::vector<const PointwiseRegion*> pointwise_regions() const;
  // With fp8: the linear layers kept in bf16, a line each ("<node>: why").
  const std::vector<std::string>& fp8_kept() const { return fp8_kept_; }
  // With fp8: the scaling state of each FP8 linear layer and self-attention projection, in
  // program order (ImageClassifier::Fp8States).
  std::vector<c10::intrusive_ptr<Fp8LinearState>> fp8_states() const;

 private:
  GraphProgram();

  BufferPlan values_;  // one slot per named graph value
  std::vector<std::unique_ptr<GraphCall>> calls_;
  int num_classes_ = 0;
  int image_size_ = 0;
  int channels_ = 3;
  FusedBlockCounts fused_blocks_;
  std::vector<std::string> fp8_kept_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_PROGRAM_H_
