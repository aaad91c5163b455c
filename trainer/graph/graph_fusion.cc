#include "trainer/graph/graph_fusion.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "trainer/nn/fused_blocks.h"
#include "trainer/nn/sync_batch_norm.h"

namespace stoker::trainer {
namespace {

// aten::batch_norm's arguments by position, as the fused call keeps them.
enum BatchNormArg {
  kInput,
  kWeight,
  kBias,
  kRunningMean,
  kRunningVar,
  kTraining,
  kMomentum,
  kEps,
  kCudnnEnabled
};

bool IsOp(const GraphCall& call, const char* name, const char* overload = "") {
  if (call.kind != GraphCall::Kind::kOperator || !call.op.has_value()) return false;
  const c10::OperatorName& op = call.op->operator_name();
  return op.name == name && op.overload_name == overload;
}

bool IsSlot(const GraphArg& arg) { return arg.kind == GraphArg::Kind::kSlot && arg.slot >= 0; }

bool IsConstant(const GraphArg& arg) { return arg.kind == GraphArg::Kind::kConstant; }

// The slots `call` reads.
std::vector<int> Reads(const GraphCall& call) {
  std::vector<int> slots;
  for (const GraphArg& arg : call.args) {
    if (arg.kind == GraphArg::Kind::kSlot && arg.slot >= 0) slots.push_back(arg.slot);
    for (int s : arg.slots) {
      if (s >= 0) slots.push_back(s);
    }
  }
  if (call.residual_slot >= 0) slots.push_back(call.residual_slot);
  return slots;
}

// Whether `call` writes `slot` in place.
bool Writes(const GraphCall& call, int slot) {
  switch (call.kind) {
    case GraphCall::Kind::kOperator: {
      const std::vector<c10::Argument>& formals = call.op->schema().arguments();
      for (size_t i = 0; i < formals.size() && i < call.args.size(); ++i) {
        const c10::AliasInfo* alias = formals[i].alias_info();
        if (alias != nullptr && alias->isWrite() && IsSlot(call.args[i]) &&
            call.args[i].slot == slot) {
          return true;
        }
      }
      return false;
    }
    case GraphCall::Kind::kDropout:
      return call.in_place && call.args[0].slot == slot;
    case GraphCall::Kind::kBatchNorm:
      return call.args[kRunningMean].slot == slot || call.args[kRunningVar].slot == slot;
    default:
      return false;
  }
}

bool IsReLU(const GraphCall& call, int self) {
  return (IsOp(call, "aten::relu") || IsOp(call, "aten::relu_")) && IsSlot(call.args[0]) &&
         call.args[0].slot == self;
}

// A batch norm the kernels can stand for: tensors for the parameters and statistics,
// constants for the flags and numbers.
bool IsFusableBatchNorm(const GraphCall& call) {
  if (!IsOp(call, "aten::batch_norm") || call.args.size() != 9) return false;
  for (int i : {kInput, kWeight, kBias, kRunningMean, kRunningVar}) {
    if (!IsSlot(call.args[i])) return false;
  }
  return IsConstant(call.args[kTraining]) && call.args[kTraining].constant.isBool() &&
         IsConstant(call.args[kMomentum]) && call.args[kMomentum].constant.isDouble() &&
         IsConstant(call.args[kEps]) && call.args[kEps].constant.isDouble() &&
         IsConstant(call.args[kCudnnEnabled]) && call.args[kCudnnEnabled].constant.isBool() &&
         call.outputs.size() == 1 && call.outputs[0].size() == 1 && call.outputs[0][0] >= 0;
}

// For `add` or `add_` of `operand` with alpha 1: the other operand's slot, else -1.
int ResidualOf(const GraphCall& call, int operand, bool* in_place) {
  const bool add_ = IsOp(call, "aten::add_", "Tensor");
  if (!add_ && !IsOp(call, "aten::add", "Tensor")) return -1;
  if (call.args.size() != 3 || !IsSlot(call.args[0]) || !IsSlot(call.args[1])) return -1;
  const c10::IValue& alpha = call.args[2].constant;
  if (!IsConstant(call.args[2]) || !alpha.isScalar() || alpha.toScalar().toDouble() != 1.0) {
    return -1;
  }
  *in_place = add_;
  const int self = call.args[0].slot, other = call.args[1].slot;
  if (self == operand && other != operand) return other;
  if (!add_ && other == operand && self != operand) return self;  // add commutes; add_ not
  return -1;
}

// A square max pool with dilation 1 and floor rounding: {kernel, stride, padding}.
bool MaxPoolGeometry(const GraphCall& call, std::vector<int64_t>* geometry) {
  if (!IsOp(call, "aten::max_pool2d") || call.args.size() != 6 || !IsSlot(call.args[0])) {
    return false;
  }
  for (int i = 1; i < 6; ++i) {
    if (!IsConstant(call.args[i])) return false;
  }
  auto square = [](const c10::IValue& v, int64_t empty, int64_t* out) {
    if (!v.isIntList()) return false;
    const std::vector<int64_t> ints = v.toIntVector();
    if (ints.empty()) {
      *out = empty;
      return empty > 0;
    }
    if (ints.size() > 2 || (ints.size() == 2 && ints[0] != ints[1])) return false;
    *out = ints[0];
    return true;
  };
  int64_t kernel = 0, stride = 0, padding = 0, dilation = 0;
  if (!square(call.args[1].constant, 0, &kernel) ||
      !square(call.args[2].constant, kernel, &stride) ||
      !square(call.args[3].constant, 0, &padding) || !square(call.args[4].constant, 1, &dilation)) {
    return false;
  }
  if (dilation != 1 || !call.args[5].constant.isBool() || call.args[5].constant.toBool()) {
    return false;
  }
  if (kernel <= 0 || stride <= 0 || padding < 0 || 2 * padding > kernel) return false;
  *geometry = {kernel, stride, padding};
  return true;
}

GraphArg Constant(c10::IValue value) {
  GraphArg arg;
  arg.constant = std::move(value);
  return arg;
}

}  // namespace

FusedBlockCounts FuseBlocks(std::vector<std::unique_ptr<GraphCall>>& calls,
                            const std::vector<int>& outside_reads) {
  FusedBlockCounts counts;
  std::unordered_map<int, int> readers;
  for (const auto& call : calls) {
    for (int s : Reads(*call)) ++readers[s];
  }
  for (int s : outside_reads) ++readers[s];
  auto only_reader = [&](int slot) { return readers[slot] == 1; };

  std::vector<bool> removed(calls.size(), false);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (removed[i]) continue;
    GraphCall& call = *calls[i];

    std::vector<int64_t> pool;
    if (MaxPoolGeometry(call, &pool)) {
      auto fused = std::make_unique<GraphCall>();
      fused->kind = GraphCall::Kind::kMaxPool;
      fused->args = {call.args[0], Constant(pool[0]), Constant(pool[1]), Constant(pool[2])};
      fused->outputs = call.outputs;
      fused->list_output = call.list_output;
      calls[i] = std::move(fused);
      ++counts.max_pool;
      continue;
    }

    if (!IsFusableBatchNorm(call)) continue;
    auto fused = std::make_unique<GraphCall>();
    fused->kind = GraphCall::Kind::kBatchNorm;
    fused->args = call.args;
    fused->list_output = {false};
    // The one reader of the batch norm's output, if it has one; nothing before it may write
    // the batch norm's inputs.
    const int normalised = call.outputs[0][0];
    size_t j = i + 1;
    bool inputs_written = false;
    for (; only_reader(normalised) && j < calls.size(); ++j) {
      if (removed[j]) continue;
      const std::vector<int> reads = Reads(*calls[j]);
      if (std::find(reads.begin(), reads.end(), normalised) != reads.end()) break;
      for (int a : {kInput, kWeight, kBias, kRunningMean, kRunningVar}) {
        inputs_written = inputs_written || Writes(*calls[j], call.args[a].slot);
      }
    }
    const bool movable = only_reader(normalised) && j < calls.size() && !inputs_written;
    bool in_place = false;
    const int residual = movable ? ResidualOf(*calls[j], normalised, &in_place) : -1;
    const int sum =
        residual >= 0 && calls[j]->outputs.size() == 1 && calls[j]->outputs[0].size() == 1
            ? calls[j]->outputs[0][0]
            : -1;
    if (movable && IsReLU(*calls[j], normalised)) {
      // batch_norm -> relu: the fused call takes the ReLU's place.
      fused->relu = true;
      fused->outputs = {{calls[j]->outputs[0][0]}};
      removed[i] = true;
      calls[j] = std::move(fused);
      ++counts.batch_norm_relu;
    } else if (sum >= 0 && only_reader(sum) && j + 1 < calls.size() && IsReLU(*calls[j + 1], sum)) {
      // batch_norm -> add -> relu: the fused call takes the ReLU's place.
      fused->relu = true;
      fused->residual_slot = residual;
      fused->in_place = in_place;
      fused->outputs = {{calls[j + 1]->outputs[0][0]}};
      removed[i] = removed[j] = true;
      calls[j + 1] = std::move(fused);
      ++counts.batch_norm_add_relu;
    } else {
      // A batch norm alone stays where it is.
      fused->outputs = call.outputs;
      calls[i] = std::move(fused);
      ++counts.batch_norm;
    }
  }

  std::vector<std::unique_ptr<GraphCall>> kept;
  kept.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(calls[i]));
  }
  calls = std::move(kept);
  return counts;
}

at::Tensor RunFusedBlock(const GraphCall& call, const GraphFrame& frame) {
  const at::Tensor x = Resolve(call.args[0], frame).toTensor();
  if (call.kind == GraphCall::Kind::kMaxPool) {
    const int kernel = static_cast<int>(call.args[1].constant.toInt());
    const int stride = static_cast<int>(call.args[2].constant.toInt());
    const int padding = static_cast<int>(call.args[3].constant.toInt());
    return MaxPool2d(x, kernel, stride, padding, /*fused=*/true);
  }
  TORCH_CHECK(call.kind == GraphCall::Kind::kBatchNorm, "not a fused block");
  BatchNormArguments bn;
  bn.weight = Resolve(call.args[kWeight], frame).toTensor();
  bn.bias = Resolve(call.args[kBias], frame).toTensor();
  bn.running_mean = Resolve(call.args[kRunningMean], frame).toTensor();
  bn.running_var = Resolve(call.args[kRunningVar], frame).toTensor();
  bn.training = call.args[kTraining].constant.toBool();
  bn.momentum = call.args[kMomentum].constant.toDouble();
  bn.eps = call.args[kEps].constant.toDouble();
  at::Tensor residual;
  if (call.residual_slot >= 0) residual = (*frame.values)[call.residual_slot].toTensor();
  BatchNormGroup* group = SyncBatchNormGroup();
  if (group != nullptr && bn.training) {
    // --sync_batchnorm: Note [Sync batch norm] (trainer/nn/sync_batch_norm.h).
    at::Tensor y = SyncBatchNorm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                 bn.momentum, bn.eps, *group);
    if (residual.defined()) y = call.in_place ? y.add_(residual) : y.add(residual);
    return call.relu ? y.relu_() : y;
  }
  if (FusedBatchNormApplies(bn, x, residual)) return FusedBatchNorm(bn, x, residual, call.relu);
  at::Tensor y = at::batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.training,
                                bn.momentum, bn.eps, call.args[kCudnnEnabled].constant.toBool());
  if (residual.defined()) y = call.in_place ? y.add_(residual) : y.add(residual);
  return call.relu ? y.relu_() : y;
}

}  // namespace stoker::trainer
