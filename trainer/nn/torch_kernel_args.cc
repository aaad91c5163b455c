#include "trainer/nn/torch_kernel_args.h"

#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

namespace stoker::trainer {

void Check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, what, ": ", cudaGetErrorString(e));
}

cudaStream_t StreamOf(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

}  // namespace stoker::trainer
