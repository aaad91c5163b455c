// What the libtorch side of Stoker's CUDA kernels (layer_norm.cc, fused_blocks.cc,
// fp8_linear.cc) shares around a launch: the stream a tensor's work goes on, and turning a
// launch's cudaError_t into a c10::Error. CUDA builds only (STOKER_WITH_CUDA).
#ifndef STOKER_TRAINER_NN_TORCH_KERNEL_ARGS_H_
#define STOKER_TRAINER_NN_TORCH_KERNEL_ARGS_H_

#include <cuda_runtime_api.h>
#include <torch/types.h>

namespace stoker::trainer {

// Throws c10::Error ("<what>: <CUDA's message>") unless `e` is cudaSuccess.
void Check(cudaError_t e, const char* what);

// The current CUDA stream of `t`'s device.
cudaStream_t StreamOf(const torch::Tensor& t);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_TORCH_KERNEL_ARGS_H_
