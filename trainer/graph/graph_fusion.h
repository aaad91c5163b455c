// The fused blocks of trainer/nn/fused_blocks.h applied to a program exported from Python.
//
// Note [Fused blocks in a program]
// With fused blocks on, GraphProgram::Build rewrites these patterns of its calls:
//   batch_norm -> relu                       one kBatchNorm call with the ReLU
//   batch_norm -> add(residual) -> relu      one kBatchNorm call with the residual and ReLU
//   batch_norm (any other)                   one kBatchNorm call alone
//   max_pool2d (square, dilation 1, floor)   one kMaxPool call
//   a batch-first nn.MultiheadAttention's    one kSelfAttention call (Note [Self-attention
//   self-attention (MatchSelfAttention)      without layout copies], nn/self_attention.h)
//   (add ->) layer_norm read by matrix       one kLayerNorm call (Note [Layer norm with its
//   products (linear, conv2d, attention)     add and cast], nn/layer_norm.h) that writes the
//   only, directly or through views          autocast dtype the products would cast to
//   layer_norm (any other)                   one kLayerNorm call that writes fp32
// (relu and add in place or not; add with alpha 1; batch norms with tensors for their
// parameters and running statistics). A pattern is taken only where its intermediate values
// have no other reader, and the fused call takes the place of the
// pattern's last call: the batch norm may move later, past calls that neither read its
// output nor write its inputs (a ResNet's downsample branch sits between its last batch
// norm and the residual add). At run time a fused call runs the CUDA kernels where they
// apply (FusedBatchNormApplies, FusedMaxPoolApplies) and otherwise the ATen composition it
// replaced, on the same arguments: on the CPU the rewritten program computes what the
// original one does, op for op. With --sync_batchnorm a training-mode kBatchNorm call
// normalises over every rank's batch instead (Note [Sync batch norm],
// trainer/nn/sync_batch_norm.h), which is why --sync_batchnorm with a program needs the
// rewrite (--fused_blocks).
#ifndef STOKER_TRAINER_GRAPH_GRAPH_FUSION_H_
#define STOKER_TRAINER_GRAPH_GRAPH_FUSION_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "trainer/graph/graph_call.h"

namespace stoker::trainer {

// How many of each pattern a program's rewrite found.
struct FusedBlockCounts {
  int batch_norm = 0;  // alone
  int batch_norm_relu = 0;
  int batch_norm_add_relu = 0;
  int max_pool = 0;
  int self_attention = 0;
  int layer_norm = 0;  // with or without the add before it
  // Read by matrix products through views (ConvNeXt's LayerNorm2d: permute -> layer_norm ->
  // permute -> conv2d).
  int layer_norm_through_views = 0;
  // Read otherwise, its output in fp32 (Swin-V2's post-norm, read by the residual add).
  int layer_norm_fp32_output = 0;
  // Note [Pointwise regions] (pointwise_region.h): the regions and the calls inside them.
  int pointwise_regions = 0;
  int pointwise_ops = 0;
  // --precision=fp8 (Note [FP8 linear layers in a program], graph_fp8.h): linear layers
  // and self-attention calls whose matrix products run in FP8, and linear layers kept in
  // bf16 (the classification head, shapes FP8 cannot take).
  int fp8_linear = 0;
  int fp8_self_attention = 0;
  int fp8_kept = 0;
};

// Rewrites `calls` in place. `outside_reads` are slots read other than by calls (the
// program's output, the buffers it updates), which keeps them out of a pattern's interior.
FusedBlockCounts FuseBlocks(std::vector<std::unique_ptr<GraphCall>>& calls,
                            const std::vector<int>& outside_reads);

// The value of a kBatchNorm, kMaxPool or kSelfAttention call. Throws c10::Error.
at::Tensor RunFusedBlock(const GraphCall& call, const GraphFrame& frame);

// Runs a kLayerNorm call, storing the sum (where it has the add) and the normalised output.
void RunFusedLayerNorm(const GraphCall& call, GraphFrame& frame);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_FUSION_H_
