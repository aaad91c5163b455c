// A linear layer whose matrix products run in FP8 on the GPU's tensor cores, with delayed
// per-tensor scaling, as one autograd function.
//
// Note [FP8 linear layers]
// With --precision=fp8 the run is bf16 autocast, except the matrix products of an exported
// model's linear layers (and of its fused self-attention's in- and out-projections), which
// Fp8Linear computes from FP8 operands with at::_scaled_mm (cuBLASLt's FP8 GEMM):
//   forward   y  = x W^T + b        x and W in e4m3, y in bf16, the bias added in the
//                                   GEMM's epilogue, fast (FP8) accumulation
//   backward  dx = dy W             dy in e5m2 (Fp8Recipe::e4m3_gradients: e4m3), W e4m3
//             dW = dy^T x           from the FP8 copies saved in forward; dW in fp32
//             db = sum of dy        in fp32, from the bf16 gradient
// e4m3 (3 mantissa bits, up to 448) keeps more precision for values and weights; e5m2 (2
// bits, up to 57344, down to 2^-16) the range gradients need. Each tensor role (input,
// weight, output gradient) of each layer has its own scaling state: a history of the last
// Fp8Recipe::history amaxes (max |value|), a scale = fp8_max / (max(history) * 2^margin)
// and its inverse (Fp8LinearState, trainer/nn/fp8_state.h, which checkpoints hold: Note
// [FP8 scaling state in checkpoints]). A tensor is cast with the scale its role had
// (delayed scaling: from earlier calls), its amax is taken in the same pass, and the
// history and scale are updated after the cast; everything stays on the device (no host
// synchronisation, so the step can be captured as a CUDA graph). A role's first cast is
// preceded by an amax-only pass and an update, so that the first step is scaled from its
// own values rather than from scale 1. One kernel casts a matrix and writes its transpose
// too (the column-major operand each product needs: W^T for dx, x^T and dy^T for dW, whose
// shared dimension is the rows, zero-padded to a multiple of 16). The FP8 copies of x and
// W^T are what backward keeps: one byte an element instead of bf16's two. The master
// weights (fp32), their gradients and the optimizer are as in bf16 training.
// Shapes _scaled_mm does not take (in or out features not multiples of 16), tensors on the
// CPU, other dtypes and empty batches run at::linear instead: Fp8LinearApplies says which.
#ifndef STOKER_TRAINER_NN_FP8_LINEAR_H_
#define STOKER_TRAINER_NN_FP8_LINEAR_H_

#include <ATen/core/ivalue.h>
#include <torch/types.h>

#include "trainer/nn/fp8_state.h"

namespace stoker::trainer {

// Whether a weight of these sizes ([out, in]) can run in FP8: both multiples of 16.
bool Fp8WeightFits(at::IntArrayRef weight_sizes);

// Whether Fp8Linear runs in FP8: CUDA tensors of one device, x fp32/fp16/bf16 [..., in]
// with at least one row, a 2-D fp32/fp16/bf16 weight that fits, a bias of [out] or none.
bool Fp8LinearApplies(const torch::Tensor& x, const torch::Tensor& weight,
                      const torch::Tensor& bias);

// at::linear(x, weight, bias) with its products in FP8 (Note [FP8 linear layers]) where
// Fp8LinearApplies, else at::linear itself. The output is in autocast's dtype when autocast
// is on for CUDA, else in x's. Throws c10::Error.
torch::Tensor Fp8Linear(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, const c10::intrusive_ptr<Fp8LinearState>& state);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_FP8_LINEAR_H_
