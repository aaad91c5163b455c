// The FP8 stage of a program's build (--precision=fp8): its linear layers, and the in- and
// out-projections of its fused self-attention calls, marked to run their matrix products in
// FP8 (trainer/nn/fp8_linear.h).
//
// Note [FP8 linear layers in a program]
// After the fused-block rewrite (graph_fusion.h), MarkFp8Linears turns each aten::linear
// call whose weight is one of the model's parameters, of a shape FP8 takes (Fp8WeightFits),
// into a kFp8Linear call with a scaling state of its own, and gives each kSelfAttention
// call one state per projection that fits. The last aten::linear of the program (the
// classification head) stays bf16, as does every convolution (the patch embedding): the
// first and last layers are the most sensitive to precision and cost little. Only the
// training program is marked; evaluation runs in bf16. On the CPU a kFp8Linear call runs
// at::linear (Fp8LinearApplies), so the marked program computes what the plain one does.
// Each state is named after its layer's weight as the state dict names it
// ("encoder.layers.encoder_layer_0.mlp.0.weight", a self-attention's "...in_proj_weight" and
// "...out_proj.weight"; a weight that is no parameter: "call<index>"; a weight shared by
// several calls: "<name>#2", "#3", ... in program order), so that the same model gives the
// same names in every run (Note [FP8 scaling state in checkpoints], nn/fp8_state.h).
#ifndef STOKER_TRAINER_GRAPH_GRAPH_FP8_H_
#define STOKER_TRAINER_GRAPH_GRAPH_FP8_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainer/graph/graph_call.h"
#include "trainer/graph/graph_fusion.h"

namespace stoker::trainer {

// Marks `calls` in place (Note [FP8 linear layers in a program]); `values` is the value
// table at load, where the parameters' slots hold their tensors, and `parameters` the
// model's parameters by state-dict name (the states' names). Adds to counts' fp8_linear,
// fp8_self_attention and fp8_kept, and appends to `kept` (when not null) a line per linear
// layer kept in bf16: its node and why.
void MarkFp8Linears(std::vector<std::unique_ptr<GraphCall>>& calls,
                    const std::vector<c10::IValue>& values,
                    const std::map<std::string, at::Tensor>& parameters, const Fp8Recipe& recipe,
                    FusedBlockCounts* counts, std::vector<std::string>* kept);

// The value of a kFp8Linear call. Throws c10::Error.
at::Tensor RunFp8Linear(const GraphCall& call, const GraphFrame& frame);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_FP8_H_
