// The run of a kPointwise call (Note [Pointwise regions], pointwise_region.h): the region's
// generated forward and backward kernels (pointwise_codegen.h) compiled with NVRTC for the
// device, loaded through the CUDA driver and launched on the current stream inside a custom
// autograd function; the region's composition wherever they do not apply.
#ifndef STOKER_TRAINER_GRAPH_POINTWISE_KERNEL_H_
#define STOKER_TRAINER_GRAPH_POINTWISE_KERNEL_H_

#include <cstdint>

#include "trainer/graph/graph_call.h"

namespace stoker::trainer {

// Runs the kPointwise `call`, storing its live-outs in the frame's slots. Throws c10::Error.
void RunPointwise(const GraphCall& call, GraphFrame& frame);

// How many generated kernels (forward and backward) this process has launched. Thread-safe.
int64_t PointwiseKernelLaunches();

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_POINTWISE_KERNEL_H_
