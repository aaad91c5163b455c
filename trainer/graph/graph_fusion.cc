#include "trainer/graph/graph_fusion.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "trainer/graph/graph_calls_util.h"
#include "trainer/nn/fused_blocks.h"
#include "trainer/nn/layer_norm.h"
#include "trainer/nn/self_attention.h"
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

bool IsConstant(const GraphArg& arg) { return arg.kind == GraphArg::Kind::kConstant; }

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

bool IsInt(const GraphArg& arg, int64_t value) {
  return IsConstant(arg) && arg.constant.isInt() && arg.constant.toInt() == value;
}

bool IsInts(const GraphArg& arg, const std::vector<int64_t>& values) {
  return IsConstant(arg) && arg.constant.isIntList() && arg.constant.toIntVector() == values;
}

// The last element of an int list argument where it is a constant, else -1.
int64_t LastInt(const GraphArg& arg) {
  if (IsConstant(arg) && arg.constant.isIntList() && !arg.constant.toIntVector().empty())
    return arg.constant.toIntVector().back();
  if (arg.kind == GraphArg::Kind::kIntList && !arg.ints.empty() && arg.slots.back() < 0)
    return arg.ints.back();
  return -1;
}

// The calls of a program as a graph: who writes each slot, how many read it.
class CallGraph {
 public:
  CallGraph(const std::vector<std::unique_ptr<GraphCall>>& calls,
            const std::vector<int>& outside_reads)
      : calls_(calls) {
    for (size_t i = 0; i < calls.size(); ++i) {
      for (int s : Reads(*calls[i])) ++readers_[s];
      for (const std::vector<int>& slots : calls[i]->outputs) {
        for (int s : slots) {
          if (s >= 0) producer_[s] = static_cast<int>(i);
        }
      }
    }
    for (int s : outside_reads) ++readers_[s];
  }

  int Readers(int slot) const {
    auto found = readers_.find(slot);
    return found == readers_.end() ? 0 : found->second;
  }

  // The call that computes `arg`'s slot as its only output, if it is `name`; else -1.
  int Producer(const GraphArg& arg, const char* name, const char* overload = "") const {
    if (!IsSlot(arg)) return -1;
    auto found = producer_.find(arg.slot);
    if (found == producer_.end()) return -1;
    const GraphCall& call = *calls_[found->second];
    if (!IsOp(call, name, overload) || call.outputs.size() != 1 || call.outputs[0].size() != 1)
      return -1;
    return found->second;
  }

  // The one call that reads `slot`, if it is `name` reading it as its first argument.
  int SoleReader(int slot, const char* name, const char* overload, size_t after) const {
    if (Readers(slot) != 1) return -1;
    for (size_t j = after + 1; j < calls_.size(); ++j) {
      const GraphCall& call = *calls_[j];
      const std::vector<int> reads = Reads(call);
      if (std::find(reads.begin(), reads.end(), slot) == reads.end()) continue;
      if (!IsOp(call, name, overload) || !IsSlot(call.args[0]) || call.args[0].slot != slot ||
          call.outputs.size() != 1 || call.outputs[0].size() != 1)
        return -1;
      return static_cast<int>(j);
    }
    return -1;
  }

  const GraphCall& operator[](int i) const { return *calls_[i]; }
  int Output(int i) const { return calls_[i]->outputs[0][0]; }

 private:
  const std::vector<std::unique_ptr<GraphCall>>& calls_;
  std::unordered_map<int, int> readers_;
  std::unordered_map<int, int> producer_;
};

// aten::scaled_dot_product_attention's arguments by position.
enum AttentionArg { kQuery, kKey, kValue, kAttnMask, kDropoutP, kIsCausal, kScale, kEnableGqa };

// A batch-first nn.MultiheadAttention self-attention as torch.export records it, around the
// scaled_dot_product_attention call `attention` (Note [Self-attention without layout
// copies], trainer/nn/self_attention.h):
//   xt = transpose(x, 1, 0); proj = linear(xt, in_w, in_b)
//   packed = contiguous(squeeze(transpose(unsqueeze(unflatten(proj, -1, [3, E]), 0), 0, -2), -2))
//   q|k|v = view(transpose(view(select(packed, 0, 0|1|2), [L, N*H, D]), 0, 1), [N, H, L, D])
//   o = scaled_dot_product_attention(q, k, v, None, p, causal, scale)
//   out = transpose(view(linear(view(permute(o, [2, 0, 1, 3]), [L*N, E]), out_w, out_b),
//                        [L, N, E]), 1, 0)
// every intermediate value read by the next call only. On a match: the pattern's calls (the
// last, the output transpose, at `*last`) and a kSelfAttention call for them.
bool MatchSelfAttention(const CallGraph& graph, int attention, std::vector<int>* pattern,
                        std::unique_ptr<GraphCall>* fused) {
  const GraphCall& sdpa = graph[attention];
  if (!IsOp(sdpa, "aten::scaled_dot_product_attention") || sdpa.args.size() != 8) return false;
  if (!IsConstant(sdpa.args[kAttnMask]) || !sdpa.args[kAttnMask].constant.isNone() ||
      !IsConstant(sdpa.args[kDropoutP]) || !sdpa.args[kDropoutP].constant.isDouble() ||
      !IsConstant(sdpa.args[kIsCausal]) || !sdpa.args[kIsCausal].constant.isBool() ||
      !IsConstant(sdpa.args[kScale]) || !IsConstant(sdpa.args[kEnableGqa]) ||
      sdpa.args[kEnableGqa].constant.toBool()) {
    return false;
  }
  std::vector<int> calls = {attention};
  // q, k and v back to the packed projection.
  int packed_call = -1;
  int64_t head_dim = -1;
  for (int i = 0; i < 3; ++i) {
    const int view_heads = graph.Producer(sdpa.args[kQuery + i], "aten::view");
    if (view_heads < 0 || graph.Readers(graph.Output(view_heads)) != 1) return false;
    const int transposed = graph.Producer(graph[view_heads].args[0], "aten::transpose", "int");
    if (transposed < 0 || graph.Readers(graph.Output(transposed)) != 1 ||
        !IsInt(graph[transposed].args[1], 0) || !IsInt(graph[transposed].args[2], 1))
      return false;
    const int view_rows = graph.Producer(graph[transposed].args[0], "aten::view");
    if (view_rows < 0 || graph.Readers(graph.Output(view_rows)) != 1) return false;
    const int64_t d = LastInt(graph[view_rows].args[1]);
    if (d <= 0 || (head_dim >= 0 && d != head_dim)) return false;
    head_dim = d;
    const int selected = graph.Producer(graph[view_rows].args[0], "aten::select", "int");
    if (selected < 0 || graph.Readers(graph.Output(selected)) != 1 ||
        !IsInt(graph[selected].args[1], 0) || !IsInt(graph[selected].args[2], i))
      return false;
    const int contiguous = graph.Producer(graph[selected].args[0], "aten::contiguous");
    if (contiguous < 0 || (packed_call >= 0 && contiguous != packed_call)) return false;
    packed_call = contiguous;
    calls.insert(calls.end(), {view_heads, transposed, view_rows, selected});
  }
  if (graph.Readers(graph.Output(packed_call)) != 3) return false;
  const int squeezed = graph.Producer(graph[packed_call].args[0], "aten::squeeze", "dim");
  if (squeezed < 0 || graph.Readers(graph.Output(squeezed)) != 1 ||
      !IsInt(graph[squeezed].args[1], -2))
    return false;
  const int swapped = graph.Producer(graph[squeezed].args[0], "aten::transpose", "int");
  if (swapped < 0 || graph.Readers(graph.Output(swapped)) != 1 ||
      !IsInt(graph[swapped].args[1], 0) || !IsInt(graph[swapped].args[2], -2))
    return false;
  const int unsqueezed = graph.Producer(graph[swapped].args[0], "aten::unsqueeze");
  if (unsqueezed < 0 || graph.Readers(graph.Output(unsqueezed)) != 1 ||
      !IsInt(graph[unsqueezed].args[1], 0))
    return false;
  const int unflattened = graph.Producer(graph[unsqueezed].args[0], "aten::unflatten", "int");
  if (unflattened < 0 || graph.Readers(graph.Output(unflattened)) != 1 ||
      !IsInt(graph[unflattened].args[1], -1) || !IsConstant(graph[unflattened].args[2]) ||
      !graph[unflattened].args[2].constant.isIntList() ||
      graph[unflattened].args[2].constant.toIntVector().size() != 2 ||
      graph[unflattened].args[2].constant.toIntVector()[0] != 3)
    return false;
  const int in_proj = graph.Producer(graph[unflattened].args[0], "aten::linear");
  if (in_proj < 0 || graph.Readers(graph.Output(in_proj)) != 1) return false;
  const int input_t = graph.Producer(graph[in_proj].args[0], "aten::transpose", "int");
  if (input_t < 0 || graph.Readers(graph.Output(input_t)) != 1 ||
      !IsInt(graph[input_t].args[1], 1) || !IsInt(graph[input_t].args[2], 0) ||
      !IsSlot(graph[input_t].args[0]))
    return false;
  calls.insert(calls.end(),
               {packed_call, squeezed, swapped, unsqueezed, unflattened, in_proj, input_t});
  // The attention's output to the out-projection and back to batch first.
  const int permuted = graph.SoleReader(graph.Output(attention), "aten::permute", "", attention);
  if (permuted < 0 || !IsInts(graph[permuted].args[1], {2, 0, 1, 3})) return false;
  const int rows = graph.SoleReader(graph.Output(permuted), "aten::view", "", permuted);
  if (rows < 0) return false;
  const int out_proj = graph.SoleReader(graph.Output(rows), "aten::linear", "", rows);
  if (out_proj < 0) return false;
  const int unrows = graph.SoleReader(graph.Output(out_proj), "aten::view", "", out_proj);
  if (unrows < 0) return false;
  const int output_t = graph.SoleReader(graph.Output(unrows), "aten::transpose", "int", unrows);
  if (output_t < 0 || !IsInt(graph[output_t].args[1], 1) || !IsInt(graph[output_t].args[2], 0))
    return false;
  calls.insert(calls.end(), {permuted, rows, out_proj, unrows, output_t});

  auto call = std::make_unique<GraphCall>();
  call->kind = GraphCall::Kind::kSelfAttention;
  call->where = sdpa.where;
  call->args = {graph[input_t].args[0],  graph[in_proj].args[1],  graph[in_proj].args[2],
                graph[out_proj].args[1], graph[out_proj].args[2], GraphArg::OfConstant(head_dim),
                sdpa.args[kDropoutP],    sdpa.args[kIsCausal],    sdpa.args[kScale]};
  call->outputs = graph[output_t].outputs;
  call->list_output = {false};
  *pattern = std::move(calls);
  *fused = std::move(call);
  return true;
}

// Drops the calls marked `removed`.
void Compact(const std::vector<bool>& removed, std::vector<std::unique_ptr<GraphCall>>& calls) {
  std::vector<std::unique_ptr<GraphCall>> kept;
  kept.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(calls[i]));
  }
  calls = std::move(kept);
}

// Rewrites every MatchSelfAttention pattern whose inputs nothing writes while it runs into
// its kSelfAttention call, which takes the place of the pattern's last call.
int FuseSelfAttention(std::vector<std::unique_ptr<GraphCall>>& calls,
                      const std::vector<int>& outside_reads) {
  int fused_count = 0;
  std::vector<bool> removed(calls.size(), false);
  {
    const CallGraph graph(calls, outside_reads);
    for (size_t i = 0; i < calls.size(); ++i) {
      std::vector<int> pattern;
      std::unique_ptr<GraphCall> fused;
      if (!MatchSelfAttention(graph, static_cast<int>(i), &pattern, &fused)) continue;
      const auto [first, last] = std::minmax_element(pattern.begin(), pattern.end());
      bool inputs_written = false;
      for (int j = *first; j <= *last; ++j) {
        for (int a = 0; a < 5; ++a) {
          inputs_written =
              inputs_written || (IsSlot(fused->args[a]) && Writes(*calls[j], fused->args[a].slot));
        }
      }
      if (inputs_written) continue;
      for (int j : pattern) removed[j] = true;
      removed[*last] = false;
      calls[*last] = std::move(fused);
      ++fused_count;
    }
  }
  Compact(removed, calls);
  return fused_count;
}

// aten::layer_norm's arguments by position.
enum LayerNormArg { kNormInput, kNormalizedShape, kNormWeight, kNormBias, kNormEps, kNormCudnn };

// For each slot, the calls that read it: each once, in program order.
std::unordered_map<int, std::vector<int>> CallsReading(
    const std::vector<std::unique_ptr<GraphCall>>& calls) {
  std::unordered_map<int, std::vector<int>> readers;
  for (size_t i = 0; i < calls.size(); ++i) {
    for (int s : Reads(*calls[i])) {
      std::vector<int>& of_slot = readers[s];
      if (of_slot.empty() || of_slot.back() != static_cast<int>(i)) {
        of_slot.push_back(static_cast<int>(i));
      }
    }
  }
  return readers;
}

// A call that casts its input (first argument) to the autocast dtype before its matrix
// product: aten::linear, aten::conv2d, a kSelfAttention call.
bool IsMatrixProduct(const GraphCall& call) {
  return IsOp(call, "aten::linear") || IsOp(call, "aten::conv2d") ||
         call.kind == GraphCall::Kind::kSelfAttention;
}

// A call whose one output is a view of its first argument, whatever the dtype.
bool IsView(const GraphCall& call) {
  return (IsOp(call, "aten::permute") || IsOp(call, "aten::view") || IsOp(call, "aten::reshape") ||
          IsOp(call, "aten::_unsafe_view") || IsOp(call, "aten::flatten", "using_ints") ||
          IsOp(call, "aten::transpose", "int")) &&
         call.outputs.size() == 1 && call.outputs[0].size() == 1 && call.outputs[0][0] >= 0;
}

// What reads a layer norm's output.
enum class NormReaders {
  kMatrixProducts,              // matrix products only, reading it as their input
  kMatrixProductsThroughViews,  // the same, some through views of it
  kOther,                       // anything else, or a read outside the calls
};

// Follows `slot`'s readers through views to matrix products (IsMatrixProduct), each reading
// the value once, as its input. Then a value in the autocast dtype there is what those
// readers would cast it to under autocast anyway.
NormReaders ReadersOfNorm(const std::vector<std::unique_ptr<GraphCall>>& calls,
                          const CallGraph& graph,
                          const std::unordered_map<int, std::vector<int>>& calls_reading,
                          int slot) {
  bool through_views = false;
  std::vector<int> pending = {slot};
  while (!pending.empty()) {
    const int value = pending.back();
    pending.pop_back();
    auto found = calls_reading.find(value);
    if (found == calls_reading.end()) return NormReaders::kOther;
    int reads_seen = 0;
    for (int i : found->second) {
      const GraphCall& call = *calls[i];
      const std::vector<int> reads = Reads(call);
      if (std::count(reads.begin(), reads.end(), value) != 1 || !IsSlot(call.args[0]) ||
          call.args[0].slot != value) {
        return NormReaders::kOther;
      }
      if (IsView(call)) {
        through_views = true;
        pending.push_back(call.outputs[0][0]);
      } else if (!IsMatrixProduct(call)) {
        return NormReaders::kOther;
      }
      ++reads_seen;
    }
    if (reads_seen == 0 || reads_seen != graph.Readers(value)) return NormReaders::kOther;
  }
  return through_views ? NormReaders::kMatrixProductsThroughViews : NormReaders::kMatrixProducts;
}

// Note [Layer norm with its add and cast] (trainer/nn/layer_norm.h): every layer norm over
// the last dimension, with tensors for its weight and bias, becomes a kLayerNorm call, whose
// args are {input, None, weight, bias, eps, cast}. `cast` (true) says that only matrix products
// read its output, directly or through views (ReadersOfNorm), so that the kernels may write
// it in the autocast dtype; otherwise (false) they write fp32, as autocast's layer_norm does.
// A casting norm also takes the add.Tensor (alpha 1) that computes its input, where nothing
// between them reads the sum or writes the add's operands: its args are then {a, b, ...} and
// it writes the sum as well.
void FuseLayerNorms(std::vector<std::unique_ptr<GraphCall>>& calls,
                    const std::vector<int>& outside_reads, FusedBlockCounts& counts) {
  std::vector<bool> removed(calls.size(), false);
  {
    const CallGraph graph(calls, outside_reads);
    const std::unordered_map<int, std::vector<int>> calls_reading = CallsReading(calls);
    for (size_t j = 0; j < calls.size(); ++j) {
      const GraphCall& norm = *calls[j];
      if (!IsOp(norm, "aten::layer_norm") || norm.args.size() != 6 ||
          !IsSlot(norm.args[kNormInput]) || !IsSlot(norm.args[kNormWeight]) ||
          !IsSlot(norm.args[kNormBias]) || !IsConstant(norm.args[kNormEps]) ||
          !norm.args[kNormEps].constant.isDouble() || !IsConstant(norm.args[kNormalizedShape]) ||
          !norm.args[kNormalizedShape].constant.isIntList() ||
          norm.args[kNormalizedShape].constant.toIntVector().size() != 1 ||
          norm.outputs.size() != 1 || norm.outputs[0].size() != 1 || norm.outputs[0][0] < 0) {
        continue;
      }
      const NormReaders readers = ReadersOfNorm(calls, graph, calls_reading, norm.outputs[0][0]);
      const bool cast = readers != NormReaders::kOther;
      auto fused = std::make_unique<GraphCall>();
      fused->kind = GraphCall::Kind::kLayerNorm;
      fused->args = {norm.args[kNormInput],  GraphArg::OfConstant(c10::IValue()),
                     norm.args[kNormWeight], norm.args[kNormBias],
                     norm.args[kNormEps],    GraphArg::OfConstant(cast)};
      fused->outputs = {norm.outputs[0]};
      fused->list_output = {false};
      fused->where = norm.where;
      const int sum_slot = norm.args[kNormInput].slot;
      const int add = cast ? graph.Producer(norm.args[kNormInput], "aten::add", "Tensor") : -1;
      bool in_place = false;
      if (add >= 0 && !removed[add] && calls[add]->args.size() == 3 &&
          IsSlot(calls[add]->args[1]) &&
          ResidualOf(*calls[add], calls[add]->args[0].slot, &in_place) ==
              calls[add]->args[1].slot) {
        bool clear = true;
        for (size_t k = add + 1; k < j && clear; ++k) {
          const std::vector<int> reads = Reads(*calls[k]);
          clear = std::find(reads.begin(), reads.end(), sum_slot) == reads.end() &&
                  !Writes(*calls[k], calls[add]->args[0].slot) &&
                  !Writes(*calls[k], calls[add]->args[1].slot);
        }
        if (clear) {
          fused->args[0] = calls[add]->args[0];
          fused->args[1] = calls[add]->args[1];
          fused->outputs = {{sum_slot}, norm.outputs[0]};
          fused->list_output = {false, false};
          removed[add] = true;
        }
      }
      calls[j] = std::move(fused);
      switch (readers) {
        case NormReaders::kMatrixProducts:
          ++counts.layer_norm;
          break;
        case NormReaders::kMatrixProductsThroughViews:
          ++counts.layer_norm_through_views;
          break;
        case NormReaders::kOther:
          ++counts.layer_norm_fp32_output;
          break;
      }
    }
  }
  Compact(removed, calls);
}

}  // namespace

FusedBlockCounts FuseBlocks(std::vector<std::unique_ptr<GraphCall>>& calls,
                            const std::vector<int>& outside_reads) {
  FusedBlockCounts counts;
  counts.self_attention = FuseSelfAttention(calls, outside_reads);
  FuseLayerNorms(calls, outside_reads, counts);
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
      fused->where = call.where;
      fused->args = {call.args[0], GraphArg::OfConstant(pool[0]), GraphArg::OfConstant(pool[1]),
                     GraphArg::OfConstant(pool[2])};
      fused->outputs = call.outputs;
      fused->list_output = call.list_output;
      calls[i] = std::move(fused);
      ++counts.max_pool;
      continue;
    }

    if (!IsFusableBatchNorm(call)) continue;
    auto fused = std::make_unique<GraphCall>();
    fused->kind = GraphCall::Kind::kBatchNorm;
    fused->where = call.where;
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

  Compact(removed, calls);
  return counts;
}

void RunFusedLayerNorm(const GraphCall& call, GraphFrame& frame) {
  std::vector<c10::IValue>& values = *frame.values;
  const at::Tensor a = Resolve(call.args[0], frame).toTensor();
  const c10::IValue b = Resolve(call.args[1], frame);
  LayerNormArguments norm;
  norm.weight = Resolve(call.args[2], frame).toTensor();
  norm.bias = Resolve(call.args[3], frame).toTensor();
  norm.eps = call.args[4].constant.toDouble();
  if (!b.isTensor()) {
    const bool cast = call.args[5].constant.toBool();
    values[call.outputs[0][0]] =
        LayerNorm(a, norm, cast ? LayerNormOutput::kAutocastDtype : LayerNormOutput::kFloat);
    return;
  }
  auto [sum, y] = AddLayerNorm(a, b.toTensor(), norm);
  values[call.outputs[0][0]] = std::move(sum);
  values[call.outputs[1][0]] = std::move(y);
}

at::Tensor RunFusedBlock(const GraphCall& call, const GraphFrame& frame) {
  const at::Tensor x = Resolve(call.args[0], frame).toTensor();
  if (call.kind == GraphCall::Kind::kSelfAttention) {
    SelfAttentionArguments attention;
    auto tensor = [&](int i) {
      const c10::IValue v = Resolve(call.args[i], frame);
      return v.isTensor() ? v.toTensor() : at::Tensor();
    };
    attention.in_weight = tensor(1);
    attention.in_bias = tensor(2);
    attention.out_weight = tensor(3);
    attention.out_bias = tensor(4);
    const int64_t head_dim = call.args[5].constant.toInt();
    TORCH_CHECK(x.dim() == 3 && x.size(2) % head_dim == 0, "self-attention over ", x.sizes(),
                " with heads of ", head_dim);
    attention.heads = x.size(2) / head_dim;
    attention.dropout_p = call.args[6].constant.toDouble();
    attention.is_causal = call.args[7].constant.toBool();
    if (!call.args[8].constant.isNone()) attention.scale = call.args[8].constant.toDouble();
    if (call.fp8.size() == 2) {
      attention.in_fp8 = call.fp8[0];
      attention.out_fp8 = call.fp8[1];
    }
    return SelfAttention(x, attention);
  }
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
