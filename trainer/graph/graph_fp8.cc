#include "trainer/graph/graph_fp8.h"

#include <ATen/ATen.h>

#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/graph/graph_calls_util.h"

namespace stoker::trainer {
namespace {

bool IsLinear(const GraphCall& call) {
  return IsOp(call, "aten::linear") && call.args.size() == 3 && call.outputs.size() == 1 &&
         call.outputs[0].size() == 1 && call.outputs[0][0] >= 0;
}

// The tensor a parameter slot argument holds at load, or an undefined one.
at::Tensor Bound(const GraphArg& arg, const std::vector<c10::IValue>& values) {
  if (arg.kind != GraphArg::Kind::kSlot || arg.slot < 0 ||
      arg.slot >= static_cast<int>(values.size()) || !values[arg.slot].isTensor()) {
    return {};
  }
  return values[arg.slot].toTensor();
}

std::string SizesText(const at::Tensor& t) {
  std::ostringstream text;
  text << t.sizes();
  return text.str();
}

}  // namespace

void MarkFp8Linears(std::vector<std::unique_ptr<GraphCall>>& calls,
                    const std::vector<c10::IValue>& values,
                    const std::map<std::string, at::Tensor>& parameters, const Fp8Recipe& recipe,
                    FusedBlockCounts* counts, std::vector<std::string>* kept) {
  // Note [FP8 linear layers in a program]: the states' names.
  std::map<const c10::TensorImpl*, std::string> weight_names;
  for (const auto& [name, tensor] : parameters)
    weight_names.emplace(tensor.unsafeGetTensorImpl(), name);
  std::map<std::string, int> uses;
  auto state_of = [&](const at::Tensor& weight, size_t index) {
    auto named = weight_names.find(weight.unsafeGetTensorImpl());
    std::string name = named != weight_names.end() ? named->second : absl::StrCat("call", index);
    const int use = ++uses[name];
    if (use > 1) absl::StrAppend(&name, "#", use);
    return c10::make_intrusive<Fp8LinearState>(recipe, std::move(name));
  };
  int head = -1;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (IsLinear(*calls[i])) head = static_cast<int>(i);
  }
  auto keep = [&](const GraphCall& call, const std::string& why) {
    ++counts->fp8_kept;
    if (kept != nullptr) kept->push_back(call.where + ": " + why);
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    GraphCall& call = *calls[i];
    if (call.kind == GraphCall::Kind::kSelfAttention && call.args.size() >= 5) {
      const at::Tensor in_weight = Bound(call.args[1], values);
      const at::Tensor out_weight = Bound(call.args[3], values);
      const bool in_fits = in_weight.defined() && Fp8WeightFits(in_weight.sizes());
      const bool out_fits = out_weight.defined() && Fp8WeightFits(out_weight.sizes());
      if (!in_fits) keep(call, "self-attention in-projection " + SizesText(in_weight));
      if (!out_fits) keep(call, "self-attention out-projection " + SizesText(out_weight));
      if (!in_fits && !out_fits) continue;
      const c10::intrusive_ptr<Fp8LinearState> none;
      call.fp8 = {in_fits ? state_of(in_weight, i) : none,
                  out_fits ? state_of(out_weight, i) : none};
      ++counts->fp8_self_attention;
      continue;
    }
    if (!IsLinear(call)) continue;
    if (static_cast<int>(i) == head) {
      keep(call, "the last linear layer (the classification head)");
      continue;
    }
    const at::Tensor weight = Bound(call.args[1], values);
    if (!weight.defined()) {
      keep(call, "its weight is not a parameter");
      continue;
    }
    if (!Fp8WeightFits(weight.sizes())) {
      keep(call, "weight " + SizesText(weight) + " is not a multiple of 16 on both sides");
      continue;
    }
    call.kind = GraphCall::Kind::kFp8Linear;  // keeps `op` (aten::linear) for reports
    call.fp8 = {state_of(weight, i)};
    ++counts->fp8_linear;
  }
}

at::Tensor RunFp8Linear(const GraphCall& call, const GraphFrame& frame) {
  const at::Tensor x = Resolve(call.args[0], frame).toTensor();
  const at::Tensor weight = Resolve(call.args[1], frame).toTensor();
  const c10::IValue bias = Resolve(call.args[2], frame);
  return Fp8Linear(x, weight, bias.isTensor() ? bias.toTensor() : at::Tensor(), call.fp8.at(0));
}

}  // namespace stoker::trainer
