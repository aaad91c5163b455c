// CUDA C++ source of a pointwise region's kernels (Note [Pointwise regions],
// pointwise_region.h) and its compilation with NVRTC, which needs the NVRTC library but no GPU.
//
// Note [Pointwise kernel layout]
// A kernel walks the region's broadcast shape in the memory order of its outputs, one element
// per thread in a grid-stride loop: the shape's dimensions are put in that order and merged
// where every operand allows, leaving `rank` dimensions. An operand whose strides are the
// contiguous ones of that walk (`linear`) is read at the element's index; any other (a
// permuted or transposed view, or one broadcast along some dimensions, whose stride there is
// 0) at the offset its strides give. The kernel takes one parameter, a struct of 8-byte
// fields: the operand pointers, the element count, the `rank` sizes and each operand's
// `rank` strides (the index arithmetic is 32-bit below 2^31 elements; loads are scalar, not
// vectorised). Every value is computed in float and rounded to its ATen dtype (bf16, fp16)
// where ATen would have stored it, so a forward output equals ATen's up to the order of float
// operations. The backward kernel recomputes the forward values from the region's inputs
// and walks the DAG in reverse, in float; it writes each input's gradient in the walk's
// order: in the input's dtype where the input has the region's shape, in float where it is
// broadcast (the caller reduces it with sum_to_size and casts it).
#ifndef STOKER_TRAINER_GRAPH_POINTWISE_CODEGEN_H_
#define STOKER_TRAINER_GRAPH_POINTWISE_CODEGEN_H_

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/pointwise_region.h"

namespace stoker::trainer {

// The most dimensions a kernel walks (after merging).
inline constexpr int kPointwiseMaxRank = 6;

// What a region's kernels are generated for, beyond the region itself.
struct PointwiseSignature {
  std::vector<c10::ScalarType> input_dtypes;  // float, bf16 or fp16
  std::vector<bool> input_zero_dim;           // 0-dim tensors promote as ATen's do
  std::vector<bool> input_linear;             // Note [Pointwise kernel layout]
  int rank = 1;
  // CUDA autocast was on: exp, rsqrt and pow return float, as ATen's autocast fp32 list has
  // them do.
  bool autocast = false;
  // The walk has fewer than 2^31 elements: its index arithmetic (division by the sizes) is
  // 32-bit, several times cheaper on the GPU than 64-bit.
  bool index32 = false;
  // Backward only: the inputs whose gradients are written, whether each live-out's
  // gradient is given, and whether each input has the region's full shape.
  std::vector<bool> input_needs_grad;
  std::vector<bool> output_grad_given;
  std::vector<bool> output_grad_linear;
  std::vector<bool> input_full_shape;
};

// The dtype of each node of `region` for inputs of these dtypes, as ATen's type promotion
// gives it; InvalidArgument naming the region for a dtype the kernels do not handle.
absl::StatusOr<std::vector<c10::ScalarType>> PointwiseNodeDtypes(
    const PointwiseRegion& region, const std::vector<c10::ScalarType>& input_dtypes,
    const std::vector<bool>& input_zero_dim, bool autocast);

// The source of `extern "C" __global__ void pointwise_forward(Params)`: reads the inputs,
// writes the live-outs (in their dtypes, linear). Parameter pointers: inputs, then outputs;
// strides: inputs.
absl::StatusOr<std::string> PointwiseForwardSource(const PointwiseRegion& region,
                                                   const PointwiseSignature& signature);

// The source of `extern "C" __global__ void pointwise_backward(Params)`: reads the inputs and
// the given live-out gradients, writes the gradients of the inputs that need them. Parameter
// pointers: inputs, given output gradients, then input gradients (of those that need them);
// strides: inputs, then given output gradients.
absl::StatusOr<std::string> PointwiseBackwardSource(const PointwiseRegion& region,
                                                    const PointwiseSignature& signature);

// Compiles `source` with NVRTC for compute capability major.minor: a cubin for that SM when
// `cubin`, else PTX for its virtual architecture. Unavailable when no NVRTC library loads
// (or the build has no CUDA), Internal with NVRTC's log when compilation fails.
absl::StatusOr<std::string> CompilePointwiseSource(const std::string& source, int major, int minor,
                                                   bool cubin);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_POINTWISE_CODEGEN_H_
