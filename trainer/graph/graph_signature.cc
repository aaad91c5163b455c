#include "trainer/graph/graph_signature.h"

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/graph/export_schema.h"
#include "trainer/graph/graph_node.h"

namespace stoker::trainer {

using nlohmann::json;

namespace {

absl::Status Refuse(const SignatureExpectations& expect, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(expect.where, ": ", why));
}

// Sets `*name` to the name of the tensor `body` names ("arg": {"as_tensor": ...}), the
// program's only one of its kind: refused with `why_not` when `*name` is set already or
// the argument is not a tensor.
absl::Status ReadTheOneTensor(const json& body, const SignatureExpectations& expect,
                              absl::string_view why_not, std::string* name) {
  if (!name->empty() || ArgumentKind(Field(body, "arg")) != "as_tensor")
    return Refuse(expect, why_not);
  *name = Field(Field(body, "arg"), "as_tensor").value("name", "");
  return absl::OkStatus();
}

// The input specs: parameters, buffers and tensor constants bound to `state`'s, and one image
// batch.
absl::Status ReadInputSpecs(const json& signature, const GraphState& state,
                            const SignatureExpectations& expect, ProgramSignature* read) {
  for (const json& spec : signature.value("input_specs", json::array())) {
    const std::string kind = ArgumentKind(spec);
    const json& body = Field(spec, kind.c_str());
    if (kind == "parameter" || kind == "buffer") {
      const std::string arg = Field(body, "arg").value("name", "");
      const std::string name =
          body.value(kind == "parameter" ? "parameter_name" : "buffer_name", "");
      const auto& bound = kind == "parameter" ? state.parameters : state.buffers;
      auto it = bound.find(name);
      if (it == bound.end())
        return Refuse(expect, absl::StrCat("the program reads ", kind, " ", name,
                                           ", which the archive's weights lack"));
      read->weights.push_back({arg, it->second, kind == "buffer"});
    } else if (kind == "tensor_constant") {
      const std::string name = body.value("tensor_constant_name", "");
      auto it = state.constants.find(name);
      if (it == state.constants.end())
        return Refuse(expect, absl::StrCat("the program reads tensor constant ", name,
                                           ", which the archive's constants lack"));
      read->weights.push_back({Field(body, "arg").value("name", ""), it->second, false});
    } else if (kind == "user_input") {
      RETURN_IF_ERROR(ReadTheOneTensor(
          body, expect,
          "the program's input is not one NCHW image batch (it takes more than one input, or a "
          "non-tensor one)",
          &read->input));
    } else {
      return Refuse(expect,
                    absl::StrCat("the program has an input of kind '", kind,
                                 "' (non-tensor constants, custom objects or effect tokens); "
                                 "Stoker runs programs whose inputs are parameters, buffers, "
                                 "tensor constants and one image batch"));
    }
  }
  if (read->input.empty()) return Refuse(expect, "the program has no image input");
  return absl::OkStatus();
}

// The image batch's metadata: NCHW, float, a dynamic batch, 3 channels, a static square.
absl::Status CheckImageInput(const json& tensor_values, const SignatureExpectations& expect,
                             ProgramSignature* read) {
  const std::string& input_name = read->input;
  if (!tensor_values.contains(input_name))
    return Refuse(expect, absl::StrCat("input ", input_name, " has no tensor metadata"));
  const json& meta = tensor_values[input_name];
  const json& sizes = Field(meta, "sizes");
  if (!sizes.is_array() || sizes.size() != 4) {
    return Refuse(expect,
                  absl::StrCat("input ", input_name, " is not one NCHW image batch: it has ",
                               sizes.size(), " dimensions, not 4"));
  }
  ASSIGN_OR_RETURN(
      at::ScalarType dtype,
      ScalarTypeOf(meta.value("dtype", 0), absl::StrCat(expect.where, ": input ", input_name)));
  if (!at::isFloatingType(dtype)) {
    return Refuse(expect,
                  absl::StrCat("input ", input_name, " is not one NCHW image batch: its dtype is ",
                               c10::toString(dtype), ", not a float type"));
  }
  if (sizes[0].contains("as_int")) {
    return Refuse(
        expect,
        absl::StrCat(
            "input ", input_name, " has a static batch size of ", sizes[0]["as_int"].dump(),
            ", but the data service feeds batches of other sizes (the last of an epoch, "
            "validation): "
            "export with a dynamic batch dimension, dynamic_shapes={\"",
            input_name, "\": {0: torch.export.Dim(\"batch\")}} (tools/export_model.py does)"));
  }
  for (int d = 1; d < 4; ++d) {
    if (!sizes[d].contains("as_int")) {
      return Refuse(
          expect,
          absl::StrCat("input ", input_name, ": dimension ", d, " is dynamic (",
                       sizes[d].value("as_expr", json::object()).value("expr_str", "?"),
                       "), but the data service feeds images of one fixed size and 3 channels; "
                       "make only the batch dimension dynamic"));
    }
  }
  read->channels = sizes[1]["as_int"].get<int>();
  const int height = sizes[2]["as_int"].get<int>();
  const int width = sizes[3]["as_int"].get<int>();
  if (read->channels != 3) {
    return Refuse(expect,
                  absl::StrCat("input ", input_name, " is not one NCHW image batch: it has ",
                               read->channels, " channels, the data service feeds 3 (RGB)"));
  }
  if (height != width) {
    return Refuse(expect, absl::StrCat("input ", input_name, " is ", height, "x", width,
                                       "; the data service feeds square images"));
  }
  if (expect.image_size > 0 && height != expect.image_size) {
    return Refuse(expect, absl::StrCat("the program was exported for ", height, "x", height,
                                       " images, but --image_size=", expect.image_size));
  }
  read->image_size = height;
  return absl::OkStatus();
}

// The output specs: one logits tensor, and buffer mutations (functional programs).
absl::Status ReadOutputSpecs(const json& signature, const GraphState& state,
                             const SignatureExpectations& expect, ProgramSignature* read) {
  for (const json& spec : signature.value("output_specs", json::array())) {
    const std::string kind = ArgumentKind(spec);
    const json& body = Field(spec, kind.c_str());
    if (kind == "user_output") {
      RETURN_IF_ERROR(ReadTheOneTensor(
          body, expect,
          "the program's output is not one logits tensor (it returns several values, or a "
          "non-tensor)",
          &read->output));
    } else if (kind == "buffer_mutation") {
      const std::string name = body.value("buffer_name", "");
      auto it = state.buffers.find(name);
      if (it == state.buffers.end())
        return Refuse(
            expect, absl::StrCat("the program updates buffer ", name, ", which the archive lacks"));
      read->buffer_mutations.push_back({Field(body, "arg").value("name", ""), it->second, true});
    } else {
      return Refuse(expect,
                    absl::StrCat("the program has an output of kind '", kind,
                                 "' (a loss, gradients, or a mutated input or parameter); Stoker "
                                 "runs programs that "
                                 "return logits and at most update buffers"));
    }
  }
  if (read->output.empty())
    return Refuse(expect, "the program's output is not one logits tensor (it returns none)");
  return absl::OkStatus();
}

// The logits' metadata: [batch, classes], the batch dynamic and the classes static.
absl::Status CheckLogitsOutput(const json& tensor_values, const SignatureExpectations& expect,
                               ProgramSignature* read) {
  const json& meta = tensor_values.value(read->output, json::object());
  const json& sizes = meta.value("sizes", json::array());
  if (sizes.size() != 2 || !sizes[1].contains("as_int") || sizes[0].contains("as_int")) {
    return Refuse(expect, absl::StrCat("the program's output ", read->output,
                                       " is not one logits tensor of shape [batch, classes] (its "
                                       "shape is ",
                                       sizes.dump(), ")"));
  }
  read->num_classes = sizes[1]["as_int"].get<int>();
  if (expect.num_classes > 0 && read->num_classes != expect.num_classes) {
    return Refuse(expect, absl::StrCat("the program's logits have ", read->num_classes,
                                       " classes, but --num_classes=", expect.num_classes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProgramSignature> ReadProgramSignature(const json& graph_module,
                                                      const GraphState& state,
                                                      const SignatureExpectations& expect) {
  if (!graph_module.contains("graph") || !graph_module.contains("signature")) {
    return Refuse(expect, "the program has no graph or signature");
  }
  const json& signature = graph_module["signature"];
  const json& tensor_values = graph_module["graph"].value("tensor_values", json::object());
  ProgramSignature read;
  RETURN_IF_ERROR(ReadInputSpecs(signature, state, expect, &read));
  RETURN_IF_ERROR(CheckImageInput(tensor_values, expect, &read));
  RETURN_IF_ERROR(ReadOutputSpecs(signature, state, expect, &read));
  RETURN_IF_ERROR(CheckLogitsOutput(tensor_values, expect, &read));
  return read;
}

}  // namespace stoker::trainer
