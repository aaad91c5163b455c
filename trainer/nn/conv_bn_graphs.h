// cuDNN runtime-fusion graphs for a convolution with its batch norm (Note [Conv + batch norm
// fusion] in conv_bn_fusion.h): the one place that includes cudnn-frontend, whose header
// takes long to compile, so nothing else does. Free of libtorch: pointers, shapes and a
// stream in, an absl::Status out.
//
// Layouts: activations NHWC in memory ([N, C, H, W] channels_last), filters KRSC
// ([K, C, R, S] channels_last), per-channel vectors [C] contiguous.
#ifndef STOKER_TRAINER_NN_CONV_BN_GRAPHS_H_
#define STOKER_TRAINER_NN_CONV_BN_GRAPHS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/element_type.h"

namespace stoker::trainer {

// One 2-D convolution: square stride and padding, dilation 1, no groups.
struct ConvShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel = 1, stride = 1, padding = 0;
  ElementType type = ElementType::kBFloat16;  // activations and filter: kBFloat16 or kFloat16

  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  // "n256 c64 h56 w56 k256 r1 s1 p0 bf16", for messages and cache keys.
  std::string ToString() const;
};

// The fused graphs. With x the convolution's input and y = conv(x', w) its output:
enum class ConvBnGraph {
  // y = conv(x, w); sum[k] and sum_sq[k] of y (fp32) from the epilogue.
  kForwardStats,
  // The same with x' = relu(x * scale[c] + shift[c]) applied to the operand as it is
  // loaded: the previous batch norm and its ReLU, never written out.
  kNormReluForwardStats,
  // Backward of y = conv(relu(bn(x)), w) through the ReLU: g = dgrad(dy, w) * (bn(x) > 0),
  // written out, with the batch norm's weight and bias gradients from the epilogue:
  // dgamma[c] = sum(g * (x - mean) * invstd), dbeta[c] = sum(g). bn(x) = (x - mean) *
  // invstd * gamma + beta.
  kDgradReluNormWeight,
  // dw = wgrad(dy, relu(x * scale[c] + shift[c])), the operand normalised as it is loaded.
  kNormReluWgrad,
};

// Device pointers by role; the graph reads or writes the ones its kind names above.
struct ConvBnTensors {
  const void* x = nullptr;        // [N, C, H, W]
  const void* w = nullptr;        // [K, C, R, S]
  void* y = nullptr;              // [N, K, P, Q]
  const void* dy = nullptr;       // [N, K, P, Q]
  void* g = nullptr;              // [N, C, H, W]: kDgradReluNormWeight's output
  void* dw = nullptr;             // [K, C, R, S]
  const void* scale = nullptr;    // [C], of ConvBnPlanInfo::scale_type
  const void* shift = nullptr;    // [C], of ConvBnPlanInfo::scale_type
  const float* mean = nullptr;    // [C]
  const float* invstd = nullptr;  // [C]
  const float* gamma = nullptr;   // [C]
  const float* beta = nullptr;    // [C]
  float* sum = nullptr;           // [K]
  float* sum_sq = nullptr;        // [K]
  float* dgamma = nullptr;        // [C]
  float* dbeta = nullptr;         // [C]
  // kDgradReluNormWeight's per-channel coefficients of the batch norm's data gradient
  // (cuDNN's own; Stoker recomputes them from dgamma and dbeta and ignores these).
  float* eq_scale_dy = nullptr;  // [C]
  float* eq_scale_x = nullptr;   // [C]
  float* eq_bias = nullptr;      // [C]
};

struct ConvBnPlanInfo {
  int64_t workspace_bytes = 0;
  // Element type of `scale` and `shift`: kFloat32 where an engine takes them so, else the
  // activations' type.
  ElementType scale_type = ElementType::kFloat32;
};

// Builds the graph of `kind` for `shape` the first time (a plan cache keyed by kind and
// shape; a failure is cached too) and returns its workspace size. NotFound with cuDNN's
// reason, for each variant tried, where no engine supports the graph. Thread-safe. Needs
// the current CUDA device to be the one the graph will run on.
absl::StatusOr<ConvBnPlanInfo> PrepareConvBnGraph(ConvBnGraph kind, const ConvShape& shape);

// Runs the prepared graph of `kind` for `shape` on `stream`, after the work already there.
// `workspace` holds PrepareConvBnGraph's workspace_bytes. FailedPrecondition when the graph
// was not prepared successfully. Thread-safe (calls are serialised).
absl::Status RunConvBnGraph(ConvBnGraph kind, const ConvShape& shape, const ConvBnTensors& tensors,
                            void* workspace, cudaStream_t stream);

// "forward_stats", "norm_relu_forward_stats", ...: the kind's name in messages.
const char* ConvBnGraphName(ConvBnGraph kind);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_CONV_BN_GRAPHS_H_
