#include "trainer/graph/graph_arguments.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/List.h>

#include <map>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/graph/export_schema.h"

namespace stoker::trainer {

using nlohmann::json;

namespace {

// What a converter reads.
struct ArgumentValue {
  const json& value;        // the serialised Argument: {"<kind>": body}
  const json& body;         // its body
  const std::string& kind;  // "as_int"
  c10::TypeKind element;    // the schema type, an optional's element type for an optional
  const std::string& what;  // "<where>: node <name> (<target>): argument <name>"
  BufferPlan& plan;
};

// Fills `arg` from `in`; Note [Argument converters].
using ArgumentConverter = absl::Status (*)(const ArgumentValue& in, GraphArg* arg);

absl::Status ConvertNone(const ArgumentValue&, GraphArg* arg) {
  arg->constant = c10::IValue();
  return absl::OkStatus();
}

absl::Status ConvertTensor(const ArgumentValue& in, GraphArg* arg) {
  arg->kind = GraphArg::Kind::kSlot;
  arg->slot = in.plan.SlotOf(in.body.value("name", ""));
  return absl::OkStatus();
}

absl::Status ConvertOptionalTensor(const ArgumentValue& in, GraphArg* arg) {
  if (in.body.contains("as_tensor")) {
    arg->kind = GraphArg::Kind::kSlot;
    arg->slot = in.plan.SlotOf(in.body["as_tensor"].value("name", ""));
  }
  return absl::OkStatus();
}

absl::Status ConvertTensors(const ArgumentValue& in, GraphArg* arg) {
  arg->kind = GraphArg::Kind::kTensorList;
  for (const json& t : in.body) arg->slots.push_back(in.plan.SlotOf(t.value("name", "")));
  return absl::OkStatus();
}

absl::Status ConvertOptionalTensors(const ArgumentValue& in, GraphArg* arg) {
  arg->kind = GraphArg::Kind::kOptionalTensorList;
  for (const json& t : in.body) {
    arg->slots.push_back(t.contains("as_tensor") ? in.plan.SlotOf(t["as_tensor"].value("name", ""))
                                                 : -1);
  }
  return absl::OkStatus();
}

// A number as the schema type it is passed as, where that differs from its own.
const std::map<c10::TypeKind, c10::IValue (*)(const c10::Scalar&)>& NumberAsSchemaType() {
  static const auto* const kNumberAs =
      new std::map<c10::TypeKind, c10::IValue (*)(const c10::Scalar&)>{
          {c10::TypeKind::TensorType,
           [](const c10::Scalar& scalar) -> c10::IValue {
             at::Tensor wrapped = at::scalar_to_tensor(scalar);
             wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
             return wrapped;
           }},
          {c10::TypeKind::FloatType,
           [](const c10::Scalar& scalar) -> c10::IValue { return scalar.toDouble(); }},
          {c10::TypeKind::ListType,
           [](const c10::Scalar& scalar) -> c10::IValue {
             return std::vector<int64_t>{scalar.toLong()};
           }},
      };
  return *kNumberAs;
}

absl::Status ConvertNumber(const ArgumentValue& in, GraphArg* arg) {
  const c10::Scalar scalar = in.kind == "as_int"     ? c10::Scalar(in.body.get<int64_t>())
                             : in.kind == "as_float" ? c10::Scalar(in.body.get<double>())
                                                     : c10::Scalar(in.body.get<bool>());
  auto as = NumberAsSchemaType().find(in.element);
  if (as != NumberAsSchemaType().end()) {
    arg->constant = as->second(scalar);
  } else if (in.kind == "as_int") {
    arg->constant = scalar.toLong();
  } else if (in.kind == "as_float") {
    arg->constant = scalar.toDouble();
  } else {
    arg->constant = scalar.toBool();
  }
  return absl::OkStatus();
}

absl::Status ConvertInts(const ArgumentValue& in, GraphArg* arg) {
  arg->constant = in.body.get<std::vector<int64_t>>();
  return absl::OkStatus();
}

absl::Status ConvertFloats(const ArgumentValue& in, GraphArg* arg) {
  arg->constant = in.body.get<std::vector<double>>();
  return absl::OkStatus();
}

absl::Status ConvertBools(const ArgumentValue& in, GraphArg* arg) {
  c10::List<bool> bools;
  for (const json& b : in.body) bools.push_back(b.get<bool>());
  arg->constant = bools;
  return absl::OkStatus();
}

absl::Status ConvertString(const ArgumentValue& in, GraphArg* arg) {
  arg->constant = in.body.get<std::string>();
  return absl::OkStatus();
}

absl::Status ConvertStrings(const ArgumentValue& in, GraphArg* arg) {
  arg->constant = in.body.get<std::vector<std::string>>();
  return absl::OkStatus();
}

absl::Status ConvertOneSymInt(const ArgumentValue& in, GraphArg* arg) {
  if (!ConvertSymInt(in.value, in.plan, arg))
    return absl::InvalidArgumentError(absl::StrCat(in.what, ": malformed symbolic int"));
  return absl::OkStatus();
}

absl::Status ConvertSymInts(const ArgumentValue& in, GraphArg* arg) {
  arg->kind = GraphArg::Kind::kIntList;
  for (const json& s : in.body) {
    if (s.contains("as_name")) {
      arg->slots.push_back(in.plan.SlotOf(s["as_name"].get<std::string>()));
      arg->ints.push_back(0);
    } else {
      arg->slots.push_back(-1);
      arg->ints.push_back(s.value("as_int", int64_t{0}));
    }
  }
  return absl::OkStatus();
}

// A constant that the archive gives as its enum code, decoded by `kDecode` (ScalarTypeOf,
// MemoryFormatOf or LayoutOf of export_schema.h).
template <typename T, absl::StatusOr<T> (*kDecode)(int, absl::string_view)>
absl::Status ConvertCodedConstant(const ArgumentValue& in, GraphArg* arg) {
  ASSIGN_OR_RETURN(T value, kDecode(in.body.get<int>(), in.what));
  arg->constant = value;
  return absl::OkStatus();
}

absl::Status ConvertDevice(const ArgumentValue& in, GraphArg* arg) {
  ASSIGN_OR_RETURN(c10::Device d, DeviceOf(in.body, in.what));
  (void)d;  // Note [Devices of a program]: the run's device.
  arg->kind = GraphArg::Kind::kDevice;
  return absl::OkStatus();
}

absl::Status ConvertComplex(const ArgumentValue& in, GraphArg* arg) {
  arg->constant = c10::complex<double>(in.body.value("real", 0.0), in.body.value("imag", 0.0));
  return absl::OkStatus();
}

// Note [Argument converters].
const std::unordered_map<std::string, ArgumentConverter>& Converters() {
  static const auto* const kConverters = new std::unordered_map<std::string, ArgumentConverter>{
      {"as_none", ConvertNone},
      {"as_tensor", ConvertTensor},
      {"as_optional_tensor", ConvertOptionalTensor},
      {"as_tensors", ConvertTensors},
      {"as_optional_tensors", ConvertOptionalTensors},
      {"as_int", ConvertNumber},
      {"as_float", ConvertNumber},
      {"as_bool", ConvertNumber},
      {"as_ints", ConvertInts},
      {"as_floats", ConvertFloats},
      {"as_bools", ConvertBools},
      {"as_string", ConvertString},
      {"as_strings", ConvertStrings},
      {"as_sym_int", ConvertOneSymInt},
      {"as_sym_ints", ConvertSymInts},
      {"as_scalar_type", ConvertCodedConstant<at::ScalarType, ScalarTypeOf>},
      {"as_memory_format", ConvertCodedConstant<at::MemoryFormat, MemoryFormatOf>},
      {"as_layout", ConvertCodedConstant<at::Layout, LayoutOf>},
      {"as_device", ConvertDevice},
      {"as_complex", ConvertComplex},
  };
  return *kConverters;
}

// An argument the node leaves out: the schema's default.
absl::StatusOr<GraphArg> DefaultArgument(const GraphNode& node, const c10::Argument& formal,
                                         c10::TypeKind element) {
  if (!formal.default_value().has_value()) {
    return node.Refuse(
        absl::StrCat("argument '", formal.name(), "' is missing and has no default"));
  }
  GraphArg arg;
  arg.constant = *formal.default_value();
  if (element == c10::TypeKind::DeviceObjType && !arg.constant.isNone())
    arg.kind = GraphArg::Kind::kDevice;
  return arg;
}

}  // namespace

absl::StatusOr<GraphArg> ConvertArgument(const GraphNode& node, const c10::Argument& formal,
                                         BufferPlan& plan) {
  const c10::TypePtr& type = formal.type();
  c10::TypePtr element = type;
  if (type->kind() == c10::TypeKind::OptionalType)
    element = type->castRaw<c10::OptionalType>()->getElementType();
  GraphArg arg;
  if (element->kind() == c10::TypeKind::GeneratorType) {
    arg.kind = GraphArg::Kind::kGenerator;
    return arg;
  }
  auto found = node.inputs.find(formal.name());
  if (found == node.inputs.end()) return DefaultArgument(node, formal, element->kind());
  const json& value = *found->second;
  const std::string kind = ArgumentKind(value);
  const json& body = value[kind];
  const std::string what = absl::StrCat(node.where, ": argument ", formal.name());
  auto converter = Converters().find(kind);
  if (converter == Converters().end()) {
    return node.Refuse(absl::StrCat("argument ", formal.name(), " is of kind ", kind,
                                    ", which Stoker does not convert (symbolic floats or "
                                    "bools, custom objects, operators)"));
  }
  RETURN_IF_ERROR(converter->second({value, body, kind, element->kind(), what, plan}, &arg));
  return arg;
}

absl::StatusOr<std::vector<GraphArg>> ConvertArguments(const GraphNode& node,
                                                       const c10::FunctionSchema& schema,
                                                       BufferPlan& plan) {
  std::vector<GraphArg> args;
  for (const c10::Argument& formal : schema.arguments()) {
    ASSIGN_OR_RETURN(GraphArg arg, ConvertArgument(node, formal, plan));
    args.push_back(std::move(arg));
  }
  return args;
}

bool ConvertSymInt(const json& argument, BufferPlan& plan, GraphArg* arg) {
  const std::string kind = ArgumentKind(argument);
  if (kind == "as_int") {
    arg->constant = argument["as_int"].get<int64_t>();
    return true;
  }
  if (kind == "as_sym_int" && argument["as_sym_int"].contains("as_name")) {
    arg->kind = GraphArg::Kind::kSlot;
    arg->slot = plan.SlotOf(argument["as_sym_int"]["as_name"]);
    return true;
  }
  if (kind == "as_sym_int" && argument["as_sym_int"].contains("as_int")) {
    arg->constant = argument["as_sym_int"]["as_int"].get<int64_t>();
    return true;
  }
  return false;
}

int OutputSlot(const json& output, BufferPlan& plan) {
  const std::string kind = ArgumentKind(output);
  if (kind == "as_tensor") return plan.SlotOf(output["as_tensor"].value("name", ""));
  if (kind == "as_sym_int" && output["as_sym_int"].contains("as_name"))
    return plan.SlotOf(output["as_sym_int"]["as_name"]);
  return -1;
}

absl::Status ConvertReturns(const GraphNode& node, const c10::FunctionSchema& schema,
                            BufferPlan& plan, GraphCall* call) {
  const size_t returns = schema.returns().size();
  if (node.outputs.size() != returns) {
    return node.Refuse(absl::StrCat("the node has ", node.outputs.size(),
                                    " outputs, the operator returns ", returns));
  }
  for (size_t r = 0; r < returns; ++r) {
    const json& output = node.outputs[r];
    if (ArgumentKind(output) == "as_tensors") {
      std::vector<int> slots;
      for (const json& t : output["as_tensors"]) slots.push_back(plan.SlotOf(t.value("name", "")));
      call->outputs.push_back(std::move(slots));
      call->list_output.push_back(true);
    } else {
      call->outputs.push_back({OutputSlot(output, plan)});
      call->list_output.push_back(false);
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
