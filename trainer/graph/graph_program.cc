#include "trainer/graph/graph_program.h"

#include <ATen/record_function.h>

#include <set>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "trainer/graph/graph_arguments.h"
#include "trainer/graph/graph_fp8.h"
#include "trainer/graph/graph_fusion.h"
#include "trainer/graph/graph_node.h"
#include "trainer/graph/graph_schema.h"
#include "trainer/graph/pointwise_region.h"

namespace stoker::trainer {

using nlohmann::json;

// Note [Evaluation from the training program]
// A plain torch.export.save archive holds the training-mode program only. Evaluation then
// runs that program with what model.eval() changes in torch.nn's own layers: batch norm
// uses its running statistics (aten::batch_norm's `training` is false), dropout is the
// identity, and in-place updates of buffers (num_batches_tracked) are skipped. A module
// whose Python code branches on `self.training` in other ways (torchvision's stochastic
// depth) has that branch frozen into the training program; tools/export_model.py exports
// the evaluation program beside it, and Stoker then runs that one.

namespace {

// A kSymArith call: integer arithmetic on the operands a and b.
absl::StatusOr<std::unique_ptr<GraphCall>> SymArithCall(const GraphNode& node,
                                                        const NodeOperator& op,
                                                        BufferPlan& values) {
  auto call = std::make_unique<GraphCall>();
  call->kind = GraphCall::Kind::kSymArith;
  call->sym_op = op.sym_op;
  for (const char* operand : {"a", "b"}) {
    GraphArg arg;
    if (!ConvertSymInt(*node.inputs.at(operand), values, &arg))
      return node.Refuse("an operand is not an integer size");
    call->args.push_back(std::move(arg));
  }
  if (!node.outputs.is_array() || node.outputs.size() != 1) return node.Refuse("not one output");
  call->outputs.push_back({OutputSlot(node.outputs[0], values)});
  call->list_output.push_back(false);
  return call;
}

// A kSymSize call: the size, numel or stride of the tensor `self`.
absl::StatusOr<std::unique_ptr<GraphCall>> SymSizeCall(const GraphNode& node,
                                                       const NodeOperator& op, BufferPlan& values) {
  auto call = std::make_unique<GraphCall>();
  call->kind = GraphCall::Kind::kSymSize;
  call->sym_op = op.sym_op;
  GraphArg self;
  self.kind = GraphArg::Kind::kSlot;
  self.slot = values.SlotOf(Field(*node.inputs.at("self"), "as_tensor").value("name", ""));
  call->args.push_back(std::move(self));
  if (call->sym_op != "numel") {
    GraphArg dim;
    auto found = node.inputs.find("dim");
    if (found == node.inputs.end() || !ConvertSymInt(*found->second, values, &dim))
      return node.Refuse("malformed size query");
    call->args.push_back(std::move(dim));
  }
  if (!node.outputs.is_array() || node.outputs.size() != 1) return node.Refuse("not one output");
  call->outputs.push_back({OutputSlot(node.outputs[0], values)});
  call->list_output.push_back(false);
  return call;
}

// Note [Evaluation from the training program]: an in-place update of a buffer becomes an
// alias of its input, batch norm uses its running statistics, dropout is the identity.
void AsEvaluation(const NodeOperator& op, const BufferPlan& values, GraphCall* call) {
  const c10::FunctionSchema& schema = op.handle->schema();
  const bool mutates_buffer =
      !schema.arguments().empty() && schema.arguments()[0].alias_info() != nullptr &&
      schema.arguments()[0].alias_info()->isWrite() &&
      call->args[0].kind == GraphArg::Kind::kSlot && values.HoldsBuffer(call->args[0].slot);
  if (mutates_buffer) {
    call->kind = GraphCall::Kind::kAlias;
  } else if (op.name.name == "aten::batch_norm") {
    call->args[*schema.argumentIndexWithName("training")].constant = false;
    call->args[*schema.argumentIndexWithName("training")].kind = GraphArg::Kind::kConstant;
  } else if (IsDropout(op)) {
    call->args[*schema.argumentIndexWithName("train")].constant = false;
    call->args[*schema.argumentIndexWithName("train")].kind = GraphArg::Kind::kConstant;
  }
}

// A call of an ATen operator through the dispatcher (kDropout for dropout, kAlias for a
// skipped buffer update).
absl::StatusOr<std::unique_ptr<GraphCall>> OperatorCall(const GraphNode& node,
                                                        const NodeOperator& op, BufferPlan& values,
                                                        bool eval_from_training) {
  const c10::FunctionSchema& schema = op.handle->schema();
  RETURN_IF_ERROR(CheckArgumentNames(node, schema));
  auto call = std::make_unique<GraphCall>();
  ASSIGN_OR_RETURN(call->args, ConvertArguments(node, schema, values));
  RETURN_IF_ERROR(CheckSeeded(node, op, call->args));
  RETURN_IF_ERROR(ConvertReturns(node, schema, values, call.get()));
  if (eval_from_training) AsEvaluation(op, values, call.get());
  if (IsDropout(op) && call->kind == GraphCall::Kind::kOperator) {
    call->kind = GraphCall::Kind::kDropout;
    call->in_place = op.name.name == "aten::dropout_";
  }
  if (call->kind == GraphCall::Kind::kOperator || call->kind == GraphCall::Kind::kAlias)
    call->op = op.handle;
  return call;
}

// The call that runs the serialised `node`.
absl::StatusOr<std::unique_ptr<GraphCall>> CallOfNode(const json& node,
                                                      const GraphProgramOptions& options,
                                                      BufferPlan& values) {
  ASSIGN_OR_RETURN(GraphNode read, ReadGraphNode(node, options.where));
  ASSIGN_OR_RETURN(NodeOperator op, ResolveOperator(read));
  absl::StatusOr<std::unique_ptr<GraphCall>> call;
  switch (op.kind) {
    case NodeOperator::Kind::kSymArith:
      call = SymArithCall(read, op, values);
      break;
    case NodeOperator::Kind::kSymSize:
      call = SymSizeCall(read, op, values);
      break;
    case NodeOperator::Kind::kAten:
      call = OperatorCall(read, op, values, options.eval_from_training);
      break;
  }
  if (call.ok()) (*call)->where = read.where;
  return call;
}

// Note [Views as eager left them]
// torch.export drops a `.contiguous()` that was a no-op when it traced, so a recorded
// aten::view may rely on the strides its input had in that trace. The same operators can lay
// out their outputs differently on another device or in another dtype (attention's output
// on a GPU in fp32, for one), where the view is impossible. Every aten::view therefore runs
// as aten::reshape: the same view wherever a view exists, and otherwise the copy that the
// dropped `.contiguous()` made. Stoker's programs never write through a view's alias after
// the view (in-place updates of buffers only), so the copy changes no value. It runs after
// the fused rewrites, whose patterns name aten::view.
void ViewsAsReshapes(std::vector<std::unique_ptr<GraphCall>>& calls) {
  static const c10::OperatorHandle reshape =
      *c10::Dispatcher::singleton().findSchema({"aten::reshape", ""});
  for (auto& call : calls) {
    if (call->kind == GraphCall::Kind::kOperator && call->op.has_value() &&
        call->op->schema().name() == "aten::view" && call->op->schema().overload_name().empty()) {
      call->op = reshape;
    }
  }
}

// Gives the signature's values their slots: parameters and buffers bound to the model's
// tensors, the image input, and (unless the program runs for evaluation) the buffer updates.
void PlanSignature(const ProgramSignature& signature, bool eval_from_training, BufferPlan& values) {
  for (const SignatureTensor& weight : signature.weights)
    values.BindWeight(weight.value, weight.tensor, weight.is_buffer);
  values.SetInput(signature.input);
  if (eval_from_training) return;
  for (const SignatureTensor& mutation : signature.buffer_mutations)
    values.AddBufferMutation(mutation.value, mutation.tensor);
}

}  // namespace

GraphProgram::GraphProgram() = default;
GraphProgram::~GraphProgram() = default;

std::vector<std::string> GraphProgram::operators() const {
  std::set<std::string> names;
  for (const auto& call : calls_) {
    if (call->op.has_value()) names.insert(call->op->schema().operator_name().name);
  }
  return {names.begin(), names.end()};
}

std::vector<const PointwiseRegion*> GraphProgram::pointwise_regions() const {
  std::vector<const PointwiseRegion*> regions;
  for (const auto& call : calls_) {
    if (call->pointwise != nullptr) regions.push_back(call->pointwise.get());
  }
  return regions;
}

std::vector<c10::intrusive_ptr<Fp8LinearState>> GraphProgram::fp8_states() const {
  std::vector<c10::intrusive_ptr<Fp8LinearState>> states;
  for (const auto& call : calls_) {
    for (const auto& state : call->fp8) {
      if (state) states.push_back(state);
    }
  }
  return states;
}

absl::StatusOr<std::unique_ptr<GraphProgram>> GraphProgram::Build(
    const json& graph_module, const GraphState& state, const GraphProgramOptions& options) {
  ASSIGN_OR_RETURN(ProgramSignature signature,
                   ReadProgramSignature(graph_module, state,
                                        {options.where, options.num_classes, options.image_size}));
  std::unique_ptr<GraphProgram> program(new GraphProgram());
  program->channels_ = signature.channels;
  program->image_size_ = signature.image_size;
  program->num_classes_ = signature.num_classes;
  PlanSignature(signature, options.eval_from_training, program->values_);

  for (const json& node : graph_module["graph"].value("nodes", json::array())) {
    ASSIGN_OR_RETURN(std::unique_ptr<GraphCall> call, CallOfNode(node, options, program->values_));
    program->calls_.push_back(std::move(call));
  }

  if (!program->values_.SetOutput(signature.output)) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.where, ": output ", signature.output, " is never computed"));
  }
  if (options.fused_blocks) {
    program->fused_blocks_ = FuseBlocks(program->calls_, program->values_.OutsideReads());
    if (options.pointwise_fusion) {
      const PointwiseRegionCounts pointwise =
          FindPointwiseRegions(program->calls_, program->values_.OutsideReads());
      program->fused_blocks_.pointwise_regions = pointwise.regions;
      program->fused_blocks_.pointwise_ops = pointwise.ops;
    }
  }
  if (options.fp8) {
    FusedBlockCounts& counts = program->fused_blocks_;
    MarkFp8Linears(program->calls_, program->values_.values(), state.parameters, options.fp8_recipe,
                   &counts, &program->fp8_kept_);
    // Each kept line starts with the program's `where`, which the message gives once: dropped,
    // leaving fp8_kept()'s "<node>: why".
    for (std::string& line : program->fp8_kept_) {
      if (absl::StartsWith(line, options.where + ": ")) line.erase(0, options.where.size() + 2);
    }
    LogInfo(
        "%s: --precision=fp8: in FP8 %d linear layers and %d self-attention calls; in "
        "bf16 %d linear layers%s%s",
        options.where, counts.fp8_linear, counts.fp8_self_attention, counts.fp8_kept,
        program->fp8_kept_.empty() ? "" : ": ", absl::StrJoin(program->fp8_kept_, "; "));
  }
  ViewsAsReshapes(program->calls_);
  return program;
}

// Note [Devices of a program]
// torch.export records the device it traced on in arguments such as aten::empty's
// `device`. A Stoker program runs where its parameters are (the CPU in CI, a GPU in
// training), so every device argument is the device of the image batch being run.

at::Tensor GraphProgram::Run(const at::Tensor& images, at::Generator* generator) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == channels_ && images.size(2) == image_size_ &&
                  images.size(3) == image_size_,
              "the exported program takes [N, ", channels_, ", ", image_size_, ", ", image_size_,
              "] images, got ", images.sizes());
  absl::Cleanup clear = [this] { values_.ClearRunValues(); };
  std::vector<c10::IValue>& values = values_.values();
  values[values_.input_slot()] = images;
  GraphFrame frame{&values, images.device(), generator};
  for (const auto& call : calls_) {
    // A profiler that records host operators (--kernel_trace_ops) sees each call as a user
    // scope named by what it runs, around the operators and kernels it launches. Without
    // one, a flag test.
    RECORD_USER_SCOPE(call->kind == GraphCall::Kind::kPointwise ? call->pointwise->where.c_str()
                                                                : call->where.c_str());
    try {
      RunCall(*call, frame);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, call->where.empty() ? "a fused call" : call->where, ": ",
                  e.what_without_backtrace());
    }
  }
  at::Tensor logits = values[values_.output_slot()].toTensor();
  values_.ApplyBufferMutations();
  return logits;
}

}  // namespace stoker::trainer
