#include "trainer/graph/graph_program.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/List.h>
#include <ATen/core/enum_tag.h>
#include <c10/core/GradMode.h>

#include <optional>
#include <set>
#include <unordered_map>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "trainer/graph/export_schema.h"
#include "trainer/graph/graph_fusion.h"

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

constexpr absl::string_view kAtenPrefix = "torch.ops.aten.";
constexpr absl::string_view kOperatorPrefix = "_operator.";

// The kind of a serialised Argument: its one key ("as_tensor", "as_ints", ...).
std::string KindOf(const json& argument) {
  if (!argument.is_object() || argument.empty()) return "";
  return argument.begin().key();
}

// json[key], or an empty array when `json` has no such key; a reference into `json`.
const json& ListField(const json& object, const char* key) {
  static const json* const kEmpty = new json(json::array());
  return object.is_object() && object.contains(key) ? object[key] : *kEmpty;
}

// "torch.ops.aten.add_.Tensor" -> {"aten::add_", "Tensor"}; overload "default" is "".
c10::OperatorName AtenName(absl::string_view target) {
  std::vector<std::string> parts = absl::StrSplit(target.substr(kAtenPrefix.size()), '.');
  std::string overload = parts.size() > 1 ? parts[1] : "";
  if (overload == "default") overload.clear();
  return c10::OperatorName(absl::StrCat("aten::", parts[0]), overload);
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

absl::StatusOr<std::unique_ptr<GraphProgram>> GraphProgram::Build(
    const json& graph_module, const GraphState& state, const GraphProgramOptions& options) {
  const std::string& where = options.where;
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", why));
  };
  if (!graph_module.contains("graph") || !graph_module.contains("signature")) {
    return refuse("the program has no graph or signature");
  }
  const json& graph = graph_module["graph"];
  const json& signature = graph_module["signature"];
  std::unique_ptr<GraphProgram> program(new GraphProgram());

  std::unordered_map<std::string, int> slot_of;
  auto slot = [&](const std::string& name) {
    auto [it, inserted] = slot_of.emplace(name, static_cast<int>(program->values_.size()));
    if (inserted) {
      program->values_.emplace_back();
      program->persistent_.push_back(false);
    }
    return it->second;
  };
  std::set<int> buffer_slots;

  // Inputs: parameters and buffers bound to the model's tensors, one user input.
  std::string input_name;
  for (const json& spec : signature.value("input_specs", json::array())) {
    const std::string kind = KindOf(spec);
    const json& body = spec[kind];
    if (kind == "parameter" || kind == "buffer") {
      const std::string arg = body["arg"].value("name", "");
      const std::string name =
          body.value(kind == "parameter" ? "parameter_name" : "buffer_name", "");
      const auto& bound = kind == "parameter" ? state.parameters : state.buffers;
      auto it = bound.find(name);
      if (it == bound.end())
        return refuse(absl::StrCat("the program reads ", kind, " ", name,
                                   ", which the archive's weights lack"));
      const int s = slot(arg);
      program->values_[s] = it->second;
      program->persistent_[s] = true;
      if (kind == "buffer") buffer_slots.insert(s);
    } else if (kind == "user_input") {
      if (!input_name.empty() || KindOf(body["arg"]) != "as_tensor") {
        return refuse(
            "the program's input is not one NCHW image batch (it takes more than one input, or a "
            "non-tensor one)");
      }
      input_name = body["arg"]["as_tensor"].value("name", "");
    } else {
      return refuse(absl::StrCat(
          "the program has an input of kind '", kind,
          "' (constants, custom objects or effect tokens); Stoker runs programs whose inputs are "
          "parameters, buffers and one image batch"));
    }
  }
  if (input_name.empty()) return refuse("the program has no image input");
  program->input_slot_ = slot(input_name);

  const json& tensor_values = graph.value("tensor_values", json::object());
  {
    if (!tensor_values.contains(input_name))
      return refuse(absl::StrCat("input ", input_name, " has no tensor metadata"));
    const json& meta = tensor_values[input_name];
    const json& sizes = meta["sizes"];
    if (!sizes.is_array() || sizes.size() != 4) {
      return refuse(absl::StrCat("input ", input_name, " is not one NCHW image batch: it has ",
                                 sizes.size(), " dimensions, not 4"));
    }
    ASSIGN_OR_RETURN(
        at::ScalarType dtype,
        ScalarTypeOf(meta.value("dtype", 0), absl::StrCat(where, ": input ", input_name)));
    if (!at::isFloatingType(dtype)) {
      return refuse(absl::StrCat("input ", input_name,
                                 " is not one NCHW image batch: its dtype is ",
                                 c10::toString(dtype), ", not a float type"));
    }
    if (sizes[0].contains("as_int")) {
      return refuse(absl::StrCat(
          "input ", input_name, " has a static batch size of ", sizes[0]["as_int"].dump(),
          ", but the data service feeds batches of other sizes (the last of an epoch, validation): "
          "export with a dynamic batch dimension, dynamic_shapes={\"",
          input_name, "\": {0: torch.export.Dim(\"batch\")}} (tools/export_model.py does)"));
    }
    for (int d = 1; d < 4; ++d) {
      if (!sizes[d].contains("as_int")) {
        return refuse(
            absl::StrCat("input ", input_name, ": dimension ", d, " is dynamic (",
                         sizes[d].value("as_expr", json::object()).value("expr_str", "?"),
                         "), but the data service feeds images of one fixed size and 3 channels; "
                         "make only the batch dimension dynamic"));
      }
    }
    program->channels_ = sizes[1]["as_int"].get<int>();
    const int height = sizes[2]["as_int"].get<int>();
    const int width = sizes[3]["as_int"].get<int>();
    if (program->channels_ != 3) {
      return refuse(absl::StrCat("input ", input_name, " is not one NCHW image batch: it has ",
                                 program->channels_, " channels, the data service feeds 3 (RGB)"));
    }
    if (height != width) {
      return refuse(absl::StrCat("input ", input_name, " is ", height, "x", width,
                                 "; the data service feeds square images"));
    }
    if (options.image_size > 0 && height != options.image_size) {
      return refuse(absl::StrCat("the program was exported for ", height, "x", height,
                                 " images, but --image_size=", options.image_size));
    }
    program->image_size_ = height;
  }

  // Outputs: one logits tensor, and buffer mutations (functional programs).
  std::string output_name;
  for (const json& spec : signature.value("output_specs", json::array())) {
    const std::string kind = KindOf(spec);
    const json& body = spec[kind];
    if (kind == "user_output") {
      if (!output_name.empty() || KindOf(body["arg"]) != "as_tensor") {
        return refuse(
            "the program's output is not one logits tensor (it returns several values, or a "
            "non-tensor)");
      }
      output_name = body["arg"]["as_tensor"].value("name", "");
    } else if (kind == "buffer_mutation") {
      const std::string name = body.value("buffer_name", "");
      auto it = state.buffers.find(name);
      if (it == state.buffers.end())
        return refuse(
            absl::StrCat("the program updates buffer ", name, ", which the archive lacks"));
      if (!options.eval_from_training) {
        program->buffer_mutations_.emplace_back(slot(body["arg"].value("name", "")), it->second);
      }
    } else {
      return refuse(absl::StrCat(
          "the program has an output of kind '", kind,
          "' (a loss, gradients, or a mutated input or parameter); Stoker runs programs that "
          "return logits and at most update buffers"));
    }
  }
  if (output_name.empty())
    return refuse("the program's output is not one logits tensor (it returns none)");
  {
    const json& meta = tensor_values.value(output_name, json::object());
    const json& sizes = meta.value("sizes", json::array());
    if (sizes.size() != 2 || !sizes[1].contains("as_int") || sizes[0].contains("as_int")) {
      return refuse(absl::StrCat(
          "the program's output ", output_name,
          " is not one logits tensor of shape [batch, classes] (its shape is ", sizes.dump(), ")"));
    }
    program->num_classes_ = sizes[1]["as_int"].get<int>();
    if (options.num_classes > 0 && program->num_classes_ != options.num_classes) {
      return refuse(absl::StrCat("the program's logits have ", program->num_classes_,
                                 " classes, but --num_classes=", options.num_classes));
    }
  }

  // Nodes.
  for (const json& node : graph.value("nodes", json::array())) {
    const std::string target = node.value("target", "");
    const std::string name = node.value("name", target);
    auto refuse_node = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": node ", name, " (", target, "): ", why));
    };
    std::unordered_map<std::string, const json*> inputs;
    for (const json& input : ListField(node, "inputs")) {
      if (KindOf(input["arg"]) == "as_graph") {
        return refuse_node(
            "takes a subgraph: data-dependent control flow or a higher-order operator, which "
            "Stoker does not run; "
            "express the branch with tensor ops (torch.where) or make it static");
      }
      inputs[input.value("name", "")] = &input["arg"];
    }
    if (absl::StartsWith(target, "torch.ops.higher_order.")) {
      return refuse_node(
          "a higher-order operator (control flow such as cond, while_loop or map, or a wrapped "
          "subgraph), "
          "which Stoker does not run");
    }
    const json& outputs = node.value("outputs", json::array());
    auto output_slot = [&](const json& output) -> int {
      const std::string kind = KindOf(output);
      if (kind == "as_tensor") return slot(output["as_tensor"].value("name", ""));
      if (kind == "as_sym_int" && output["as_sym_int"].contains("as_name"))
        return slot(output["as_sym_int"]["as_name"]);
      return -1;
    };
    // A symbolic int or a constant int argument.
    auto int_arg = [&](const json& argument, GraphArg* arg) -> bool {
      const std::string kind = KindOf(argument);
      if (kind == "as_int") {
        arg->constant = argument["as_int"].get<int64_t>();
        return true;
      }
      if (kind == "as_sym_int" && argument["as_sym_int"].contains("as_name")) {
        arg->kind = GraphArg::Kind::kSlot;
        arg->slot = slot(argument["as_sym_int"]["as_name"]);
        return true;
      }
      if (kind == "as_sym_int" && argument["as_sym_int"].contains("as_int")) {
        arg->constant = argument["as_sym_int"]["as_int"].get<int64_t>();
        return true;
      }
      return false;
    };

    auto call = std::make_unique<GraphCall>();
    if (absl::StartsWith(target, kOperatorPrefix)) {
      const std::string op(absl::string_view(target).substr(kOperatorPrefix.size()));
      static const std::set<std::string> kArith = {"mul", "add", "sub", "floordiv", "mod"};
      if (kArith.count(op) == 0 || !inputs.count("a") || !inputs.count("b") ||
          outputs.size() != 1) {
        return refuse_node(absl::StrCat(
            "Python operator ", op,
            " on symbolic sizes is not one Stoker runs (mul, add, sub, floordiv, mod)"));
      }
      call->kind = GraphCall::Kind::kSymArith;
      call->sym_op = op;
      for (const char* operand : {"a", "b"}) {
        GraphArg arg;
        if (!int_arg(*inputs[operand], &arg))
          return refuse_node("an operand is not an integer size");
        call->args.push_back(std::move(arg));
      }
      call->outputs.push_back({output_slot(outputs[0])});
      call->list_output.push_back(false);
      program->calls_.push_back(std::move(call));
      continue;
    }
    if (!absl::StartsWith(target, kAtenPrefix)) {
      return refuse_node(
          "not an ATen operator (a custom or library op); Stoker runs graphs of torch.ops.aten "
          "operators only");
    }
    const c10::OperatorName op_name = AtenName(target);
    if (op_name.name == "aten::sym_size" || op_name.name == "aten::sym_numel" ||
        op_name.name == "aten::sym_stride") {
      call->kind = GraphCall::Kind::kSymSize;
      call->sym_op = op_name.name.substr(std::string("aten::sym_").size());
      if (!inputs.count("self") || KindOf(*inputs["self"]) != "as_tensor" || outputs.size() != 1) {
        return refuse_node("malformed size query");
      }
      GraphArg self;
      self.kind = GraphArg::Kind::kSlot;
      self.slot = slot((*inputs["self"])["as_tensor"].value("name", ""));
      call->args.push_back(std::move(self));
      if (call->sym_op != "numel") {
        GraphArg dim;
        if (!inputs.count("dim") || !int_arg(*inputs["dim"], &dim))
          return refuse_node("malformed size query");
        call->args.push_back(std::move(dim));
      }
      call->outputs.push_back({output_slot(outputs[0])});
      call->list_output.push_back(false);
      program->calls_.push_back(std::move(call));
      continue;
    }
    std::optional<c10::OperatorHandle> handle = c10::Dispatcher::singleton().findSchema(op_name);
    if (!handle.has_value()) {
      return refuse_node(
          "no such ATen operator in this libtorch (exported by another torch version?)");
    }
    const c10::FunctionSchema& schema = handle->schema();
    const bool is_dropout = op_name.name == "aten::dropout" || op_name.name == "aten::dropout_";
    bool has_generator = false;
    for (const c10::Argument& a : schema.arguments()) {
      if (a.type()->kind() == c10::TypeKind::OptionalType &&
          a.type()->castRaw<c10::OptionalType>()->getElementType()->kind() ==
              c10::TypeKind::GeneratorType) {
        has_generator = true;
      }
    }
    const bool unseeded =
        handle->hasTag(at::Tag::nondeterministic_seeded) && !has_generator && !is_dropout;
    for (const auto& [input, unused] : inputs) {
      if (!schema.argumentIndexWithName(input).has_value()) {
        return refuse_node(absl::StrCat("argument '", input, "' is not in the operator's schema ",
                                        c10::toString(schema),
                                        " (exported by another torch version?)"));
      }
    }

    // Arguments in schema order: from the node, else the schema's default.
    for (const c10::Argument& formal : schema.arguments()) {
      GraphArg arg;
      const c10::TypePtr& type = formal.type();
      c10::TypePtr element = type;
      if (type->kind() == c10::TypeKind::OptionalType)
        element = type->castRaw<c10::OptionalType>()->getElementType();
      if (element->kind() == c10::TypeKind::GeneratorType) {
        arg.kind = GraphArg::Kind::kGenerator;
        call->args.push_back(std::move(arg));
        continue;
      }
      auto found = inputs.find(formal.name());
      if (found == inputs.end()) {
        if (!formal.default_value().has_value()) {
          return refuse_node(
              absl::StrCat("argument '", formal.name(), "' is missing and has no default"));
        }
        arg.constant = *formal.default_value();
        if (element->kind() == c10::TypeKind::DeviceObjType && !arg.constant.isNone())
          arg.kind = GraphArg::Kind::kDevice;
        call->args.push_back(std::move(arg));
        continue;
      }
      const json& value = *found->second;
      const std::string kind = KindOf(value);
      const json& body = value[kind];
      const std::string what =
          absl::StrCat(where, ": node ", name, " (", target, "): argument ", formal.name());
      if (kind == "as_none") {
        arg.constant = c10::IValue();
      } else if (kind == "as_tensor") {
        arg.kind = GraphArg::Kind::kSlot;
        arg.slot = slot(body.value("name", ""));
      } else if (kind == "as_optional_tensor") {
        if (body.contains("as_tensor")) {
          arg.kind = GraphArg::Kind::kSlot;
          arg.slot = slot(body["as_tensor"].value("name", ""));
        }
      } else if (kind == "as_tensors" || kind == "as_optional_tensors") {
        arg.kind = kind == "as_tensors" ? GraphArg::Kind::kTensorList
                                        : GraphArg::Kind::kOptionalTensorList;
        for (const json& t : body) {
          if (kind == "as_tensors") {
            arg.slots.push_back(slot(t.value("name", "")));
          } else {
            arg.slots.push_back(t.contains("as_tensor") ? slot(t["as_tensor"].value("name", ""))
                                                        : -1);
          }
        }
      } else if (kind == "as_int" || kind == "as_float" || kind == "as_bool") {
        c10::Scalar scalar = kind == "as_int"     ? c10::Scalar(body.get<int64_t>())
                             : kind == "as_float" ? c10::Scalar(body.get<double>())
                                                  : c10::Scalar(body.get<bool>());
        if (element->kind() == c10::TypeKind::TensorType) {
          // Python's `x.add_(1)`: a number where a Tensor goes, as a wrapped-number tensor.
          at::Tensor wrapped = at::scalar_to_tensor(scalar);
          wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
          arg.constant = wrapped;
        } else if (element->kind() == c10::TypeKind::FloatType) {
          arg.constant = scalar.toDouble();
        } else if (element->kind() == c10::TypeKind::ListType) {
          // int[2] given as one int.
          arg.constant = std::vector<int64_t>{scalar.toLong()};
        } else if (kind == "as_int") {
          arg.constant = scalar.toLong();
        } else if (kind == "as_float") {
          arg.constant = scalar.toDouble();
        } else {
          arg.constant = scalar.toBool();
        }
      } else if (kind == "as_ints") {
        arg.constant = body.get<std::vector<int64_t>>();
      } else if (kind == "as_floats") {
        arg.constant = body.get<std::vector<double>>();
      } else if (kind == "as_bools") {
        c10::List<bool> bools;
        for (const json& b : body) bools.push_back(b.get<bool>());
        arg.constant = bools;
      } else if (kind == "as_string") {
        arg.constant = body.get<std::string>();
      } else if (kind == "as_strings") {
        arg.constant = body.get<std::vector<std::string>>();
      } else if (kind == "as_sym_int") {
        if (!int_arg(value, &arg))
          return absl::InvalidArgumentError(absl::StrCat(what, ": malformed symbolic int"));
      } else if (kind == "as_sym_ints") {
        arg.kind = GraphArg::Kind::kIntList;
        for (const json& s : body) {
          if (s.contains("as_name")) {
            arg.slots.push_back(slot(s["as_name"].get<std::string>()));
            arg.ints.push_back(0);
          } else {
            arg.slots.push_back(-1);
            arg.ints.push_back(s.value("as_int", int64_t{0}));
          }
        }
      } else if (kind == "as_scalar_type") {
        ASSIGN_OR_RETURN(at::ScalarType t, ScalarTypeOf(body.get<int>(), what));
        arg.constant = t;
      } else if (kind == "as_memory_format") {
        ASSIGN_OR_RETURN(at::MemoryFormat f, MemoryFormatOf(body.get<int>(), what));
        arg.constant = f;
      } else if (kind == "as_layout") {
        ASSIGN_OR_RETURN(at::Layout l, LayoutOf(body.get<int>(), what));
        arg.constant = l;
      } else if (kind == "as_device") {
        ASSIGN_OR_RETURN(c10::Device d, DeviceOf(body, what));
        (void)d;  // Note [Devices of a program]: the run's device.
        arg.kind = GraphArg::Kind::kDevice;
      } else if (kind == "as_complex") {
        arg.constant = c10::complex<double>(body.value("real", 0.0), body.value("imag", 0.0));
      } else {
        return refuse_node(absl::StrCat("argument ", formal.name(), " is of kind ", kind,
                                        ", which Stoker does not convert (symbolic floats or "
                                        "bools, custom objects, operators)"));
      }
      call->args.push_back(std::move(arg));
    }

    // Attention is random only through its dropout_p; with none it is deterministic.
    if (unseeded) {
      const std::optional<int> p = schema.argumentIndexWithName("dropout_p");
      const bool no_dropout = op_name.name == "aten::scaled_dot_product_attention" &&
                              p.has_value() && call->args[*p].kind == GraphArg::Kind::kConstant &&
                              call->args[*p].constant.isDouble() &&
                              call->args[*p].constant.toDouble() == 0.0;
      if (!no_dropout) {
        return refuse_node(
            "a random operator without a generator argument: its draws could not be seeded per "
            "step, "
            "so resuming would not reproduce them");
      }
    }

    // Returns.
    const size_t returns = schema.returns().size();
    if (outputs.size() != returns) {
      return refuse_node(absl::StrCat("the node has ", outputs.size(),
                                      " outputs, the operator returns ", returns));
    }
    for (size_t r = 0; r < returns; ++r) {
      const json& output = outputs[r];
      if (KindOf(output) == "as_tensors") {
        std::vector<int> slots;
        for (const json& t : output["as_tensors"]) slots.push_back(slot(t.value("name", "")));
        call->outputs.push_back(std::move(slots));
        call->list_output.push_back(true);
      } else {
        call->outputs.push_back({output_slot(output)});
        call->list_output.push_back(false);
      }
    }

    // Note [Evaluation from the training program].
    if (options.eval_from_training) {
      const bool mutates_buffer =
          !schema.arguments().empty() && schema.arguments()[0].alias_info() != nullptr &&
          schema.arguments()[0].alias_info()->isWrite() &&
          call->args[0].kind == GraphArg::Kind::kSlot && buffer_slots.count(call->args[0].slot) > 0;
      if (mutates_buffer) {
        call->kind = GraphCall::Kind::kAlias;
      } else if (op_name.name == "aten::batch_norm") {
        call->args[*schema.argumentIndexWithName("training")].constant = false;
        call->args[*schema.argumentIndexWithName("training")].kind = GraphArg::Kind::kConstant;
      } else if (is_dropout) {
        call->args[*schema.argumentIndexWithName("train")].constant = false;
        call->args[*schema.argumentIndexWithName("train")].kind = GraphArg::Kind::kConstant;
      }
    }
    if (is_dropout && call->kind == GraphCall::Kind::kOperator) {
      call->kind = GraphCall::Kind::kDropout;
      call->in_place = op_name.name == "aten::dropout_";
    }
    if (call->kind == GraphCall::Kind::kOperator) call->op = handle;
    if (call->kind == GraphCall::Kind::kAlias) call->op = handle;
    program->calls_.push_back(std::move(call));
  }

  if (!slot_of.count(output_name))
    return refuse(absl::StrCat("output ", output_name, " is never computed"));
  program->output_slot_ = slot_of[output_name];
  if (options.fused_blocks) {
    std::vector<int> outside_reads = {program->output_slot_};
    for (const auto& [s, buffer] : program->buffer_mutations_) outside_reads.push_back(s);
    program->fused_blocks_ = FuseBlocks(program->calls_, outside_reads);
  }
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
  absl::Cleanup clear = [this] {
    for (size_t i = 0; i < values_.size(); ++i) {
      if (!persistent_[i]) values_[i] = c10::IValue();
    }
  };
  values_[input_slot_] = images;
  GraphFrame frame{&values_, images.device(), generator};
  for (const auto& call : calls_) RunCall(*call, frame);
  at::Tensor logits = values_[output_slot_].toTensor();
  if (!buffer_mutations_.empty()) {
    c10::NoGradGuard no_grad;
    for (auto& [s, buffer] : buffer_mutations_) buffer.copy_(values_[s].toTensor());
  }
  return logits;
}

}  // namespace stoker::trainer
