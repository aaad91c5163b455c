#include "trainer/graph/graph_call.h"

#include <ATen/ATen.h>
#include <ATen/core/List.h>

#include "trainer/graph/graph_fp8.h"
#include "trainer/graph/graph_fusion.h"
#include "trainer/graph/pointwise_kernel.h"

namespace stoker::trainer {
namespace {

void RunOperator(const GraphCall& call, GraphFrame& frame) {
  std::vector<c10::IValue>& values = *frame.values;
  torch::jit::Stack stack;
  stack.reserve(call.args.size());
  for (const GraphArg& arg : call.args) {
    if (arg.kind == GraphArg::Kind::kGenerator) {
      stack.emplace_back(frame.generator != nullptr ? c10::IValue(*frame.generator)
                                                    : c10::IValue());
    } else {
      stack.push_back(Resolve(arg, frame));
    }
  }
  call.op->callBoxed(&stack);
  for (size_t r = 0; r < call.outputs.size(); ++r) {
    const std::vector<int>& slots = call.outputs[r];
    if (call.list_output[r]) {
      c10::List<at::Tensor> list = stack[r].toTensorList();
      for (size_t i = 0; i < slots.size() && i < list.size(); ++i) values[slots[i]] = list.get(i);
    } else if (slots[0] >= 0) {
      values[slots[0]] = std::move(stack[r]);
    }
  }
}

int64_t SymSize(const GraphCall& call, const GraphFrame& frame) {
  const at::Tensor& self = (*frame.values)[call.args[0].slot].toTensor();
  if (call.sym_op == "numel") return self.numel();
  const int64_t dim = Resolve(call.args[1], frame).toInt();
  return call.sym_op == "size" ? self.size(dim) : self.stride(dim);
}

int64_t SymArith(const GraphCall& call, const GraphFrame& frame) {
  const int64_t a = Resolve(call.args[0], frame).toInt();
  const int64_t b = Resolve(call.args[1], frame).toInt();
  if (call.sym_op == "mul") return a * b;
  if (call.sym_op == "add") return a + b;
  if (call.sym_op == "sub") return a - b;
  TORCH_CHECK(b != 0, "division by zero in a size computation");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // Python's floor division
  return call.sym_op == "floordiv" ? q : a - q * b;
}

// aten::dropout(input, p, train) with the draws from the frame's generator: what ATen's
// CPU dropout computes (a Bernoulli(1 - p) mask scaled by 1 / (1 - p)).
at::Tensor Dropout(const GraphCall& call, const GraphFrame& frame) {
  at::Tensor input = (*frame.values)[call.args[0].slot].toTensor();
  const double p = Resolve(call.args[1], frame).toDouble();
  const bool train = Resolve(call.args[2], frame).toBool();
  if (!train || p <= 0) return input;
  std::optional<at::Generator> gen;
  if (frame.generator != nullptr) gen = *frame.generator;
  at::Tensor noise = at::empty_like(input, at::MemoryFormat::Contiguous);
  if (p >= 1) {
    noise.zero_();
  } else {
    noise.bernoulli_(1 - p, gen);
    noise.div_(1 - p);
  }
  return call.in_place ? input.mul_(noise) : input * noise;
}

}  // namespace

c10::IValue Resolve(const GraphArg& arg, const GraphFrame& frame) {
  const std::vector<c10::IValue>& values = *frame.values;
  switch (arg.kind) {
    case GraphArg::Kind::kConstant:
    case GraphArg::Kind::kGenerator:
      return arg.constant;
    case GraphArg::Kind::kSlot:
      return values[arg.slot];
    case GraphArg::Kind::kDevice:
      return frame.device;
    case GraphArg::Kind::kTensorList: {
      c10::List<at::Tensor> list;
      list.reserve(arg.slots.size());
      for (int s : arg.slots) list.push_back(values[s].toTensor());
      return list;
    }
    case GraphArg::Kind::kOptionalTensorList: {
      c10::List<std::optional<at::Tensor>> list;
      list.reserve(arg.slots.size());
      for (int s : arg.slots)
        list.push_back(s < 0 ? std::nullopt : std::optional<at::Tensor>(values[s].toTensor()));
      return list;
    }
    case GraphArg::Kind::kIntList: {
      std::vector<int64_t> ints = arg.ints;
      for (size_t i = 0; i < ints.size(); ++i) {
        if (arg.slots[i] >= 0) ints[i] = values[arg.slots[i]].toInt();
      }
      return ints;
    }
  }
  return c10::IValue();
}

void RunCall(const GraphCall& call, GraphFrame& frame) {
  std::vector<c10::IValue>& values = *frame.values;
  switch (call.kind) {
    case GraphCall::Kind::kOperator:
      RunOperator(call, frame);
      return;
    case GraphCall::Kind::kSymSize:
      values[call.outputs[0][0]] = SymSize(call, frame);
      return;
    case GraphCall::Kind::kSymArith:
      values[call.outputs[0][0]] = SymArith(call, frame);
      return;
    case GraphCall::Kind::kDropout:
      values[call.outputs[0][0]] = Dropout(call, frame);
      return;
    case GraphCall::Kind::kAlias:
      values[call.outputs[0][0]] = values[call.args[0].slot];
      return;
    case GraphCall::Kind::kBatchNorm:
    case GraphCall::Kind::kMaxPool:
    case GraphCall::Kind::kSelfAttention:
      values[call.outputs[0][0]] = RunFusedBlock(call, frame);
      return;
    case GraphCall::Kind::kLayerNorm:
      RunFusedLayerNorm(call, frame);
      return;
    case GraphCall::Kind::kPointwise:
      RunPointwise(call, frame);
      return;
    case GraphCall::Kind::kFp8Linear:
      values[call.outputs[0][0]] = RunFp8Linear(call, frame);
      return;
  }
}

}  // namespace stoker::trainer
