// Pointwise regions of a program: maximal connected groups of elementwise calls (add, mul,
// GELU, casts, ...) that run as one generated CUDA kernel each (Note [Pointwise regions]).
// FindPointwiseRegions rewrites them into kPointwise calls; pointwise_codegen.h writes their
// kernels and pointwise_kernel.h runs them.
//
// Note [Pointwise regions]
// An exported program spends much of a transformer's or ConvNeXt's step in short chains of
// elementwise ATen kernels (layer scale, stochastic-depth mask, residual add, GELU, casts),
// each reading and writing its whole tensor. A region is a connected group of such calls,
// grown in program order, whose values nothing outside the region reads before the region's
// last call: the region then runs in that call's place as one kPointwise call, reading its
// inputs once and writing only the values others read (its live-outs); the values only the
// region reads stay in registers. An in-place call (add_, mul_, div_, ...) is taken as its
// out-of-place form when the tensor it writes is owned: computed by the program (not an input,
// parameter or buffer), read by nothing after the call, and no view of it (nor of what it is an
// in-place update of) was taken. A region of one call is left alone. The kPointwise call keeps
// the calls it replaced: they run instead wherever the kernel does not apply (CPU tensors, a
// dtype the generator does not handle, a live-out smaller than the region's broadcast shape, no
// NVRTC or driver), so the rewrite never changes what a program computes.
#ifndef STOKER_TRAINER_GRAPH_POINTWISE_REGION_H_
#define STOKER_TRAINER_GRAPH_POINTWISE_REGION_H_

#include <memory>
#include <string>
#include <vector>

#include "trainer/graph/graph_call.h"

namespace stoker::trainer {

enum class PointwiseOp {
  kInput,  // the region's input `input`
  kAdd,
  kSub,
  kMul,
  kDiv,
  kNeg,
  kRelu,
  kGelu,      // exact (erf)
  kGeluTanh,  // approximate="tanh"
  kSilu,
  kSigmoid,
  kTanh,
  kExp,
  kRsqrt,
  kSqrt,
  kPow,    // by the scalar `scalar`
  kClamp,  // to [scalar, scalar2] where has_min / has_max
  kCast,   // to `dtype`
};

// One value of a region's expression DAG.
struct PointwiseNode {
  PointwiseOp op = PointwiseOp::kInput;
  int input = -1;             // kInput: index into PointwiseRegion::input_slots
  std::vector<int> operands;  // earlier nodes of the region
  // A binary op with one operand: its right-hand scalar. kPow: the exponent. kClamp: min.
  bool has_scalar = false;
  double scalar = 0;
  double scalar2 = 0;  // kClamp: max
  bool has_min = false, has_max = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kCast: the target
  bool keeps_first_dtype = false;  // an in-place op: the result has its `self`'s dtype
};

// A region as FindPointwiseRegions built it. Immutable after the build; shared by the
// kPointwise call and the kernels compiled for it.
struct PointwiseRegion {
  std::vector<int> input_slots;      // the tensors the region reads, in order
  std::vector<PointwiseNode> nodes;  // topological; the first input_slots.size() are kInput
  std::vector<int> output_nodes;     // the live-outs, in the order of the call's outputs
  // The calls the region replaced, in program order: its composition.
  std::vector<std::unique_ptr<GraphCall>> composition;
  // "pointwise region of <n> calls ending at <the last call's where>" ("<where>: node <name>
  // (<target>)", or "a fused call" where it has none).
  std::string where;

  // Elementwise ops: the nodes other than inputs.
  int op_count() const { return static_cast<int>(nodes.size() - input_slots.size()); }

  // "add_(mul(in0, in1), in2)"-style text of the DAG's live-outs, for logs and tests.
  std::string Describe() const;
};

struct PointwiseRegionCounts {
  int regions = 0;
  int ops = 0;  // elementwise calls inside them
};

// Rewrites every region of two or more calls into one kPointwise call (Note [Pointwise
// regions]). `outside_reads` as for FuseBlocks.
PointwiseRegionCounts FindPointwiseRegions(std::vector<std::unique_ptr<GraphCall>>& calls,
                                           const std::vector<int>& outside_reads);

// Runs the region's composition (its original calls) in `frame`. Throws c10::Error.
void RunPointwiseComposition(const PointwiseRegion& region, GraphFrame& frame);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_POINTWISE_REGION_H_
