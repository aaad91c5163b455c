// GraphCall: one step of a GraphProgram as it runs, with its arguments already converted
// at load (constants, or slots of the program's value table), and RunCall, which executes
// it. Built by graph_program.cc; rewritten into fused blocks by graph_fusion.cc and its
// linear layers into FP8 ones by graph_fp8.cc.
#ifndef STOKER_TRAINER_GRAPH_GRAPH_CALL_H_
#define STOKER_TRAINER_GRAPH_GRAPH_CALL_H_

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/nn/fp8_linear.h"

namespace stoker::trainer {

struct PointwiseRegion;

struct GraphArg {
  enum class Kind {
    kConstant,
    kSlot,
    kTensorList,
    kOptionalTensorList,
    kIntList,
    kDevice,
    kGenerator
  };
  Kind kind = Kind::kConstant;
  c10::IValue constant;
  int slot = -1;
  std::vector<int> slots;     // lists; -1 where the element is None or a constant
  std::vector<int64_t> ints;  // kIntList: the constant elements

  static GraphArg OfSlot(int slot) {
    GraphArg arg;
    arg.kind = Kind::kSlot;
    arg.slot = slot;
    return arg;
  }
  static GraphArg OfConstant(c10::IValue value) {
    GraphArg arg;
    arg.constant = std::move(value);
    return arg;
  }
};

struct GraphCall {
  enum class Kind {
    kOperator,       // `op` through the dispatcher
    kSymSize,        // a size query: `sym_op` is "size", "numel" or "stride"
    kSymArith,       // integer arithmetic on sizes: `sym_op` is "mul", "add", ...
    kDropout,        // aten::dropout(_) drawing from the run's generator
    kAlias,          // the output is the first argument (a skipped in-place update)
    kBatchNorm,      // Note [Fused blocks in a program]
    kMaxPool,        // Note [Fused blocks in a program]
    kSelfAttention,  // Note [Fused blocks in a program]
    kLayerNorm,      // Note [Fused blocks in a program]
    kPointwise,      // Note [Pointwise regions] (pointwise_region.h)
    kFp8Linear,      // aten::linear in FP8: Note [FP8 linear layers in a program]
  };
  Kind kind = Kind::kOperator;
  std::optional<c10::OperatorHandle> op;
  std::vector<GraphArg> args;
  // Per returned value, the slots it goes to: one, or one per element of a Tensor[] return.
  std::vector<std::vector<int>> outputs;
  std::vector<bool> list_output;
  std::string sym_op;
  bool in_place = false;   // kDropout: dropout_
  int residual_slot = -1;  // kBatchNorm: the added residual, -1 without
  bool relu = false;       // kBatchNorm: ReLU last
  // kPointwise: the region; `args` are its input slots, `outputs` its live-outs.
  std::shared_ptr<const PointwiseRegion> pointwise;
  // "<where>: node <name> (<target>)" of the exported node it runs (for a fused call, its
  // batch norm's, pooling's, attention's or layer norm's): the start of an error raised
  // while it runs, and the call's name in a kernel trace with host operators.
  std::string where;
  // --precision=fp8 (Note [FP8 linear layers in a program], graph_fp8.h): kFp8Linear's
  // scaling state; a kSelfAttention call's in- and out-projection's (null: that one in
  // bf16); empty: no FP8.
  std::vector<c10::intrusive_ptr<Fp8LinearState>> fp8;
};

// What the calls of one run read and write.
struct GraphFrame {
  std::vector<c10::IValue>* values;  // the program's value table, by slot
  c10::Device device;                // Note [Devices of a program]
  at::Generator* generator;          // random ops draw from it; may be null
};

// The argument's value in `frame`.
c10::IValue Resolve(const GraphArg& arg, const GraphFrame& frame);

// Runs `call`, storing its results in the frame's slots. Throws c10::Error.
void RunCall(const GraphCall& call, GraphFrame& frame);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_CALL_H_
