// The number of streaming multiprocessors of the current CUDA device, which sizes the grids
// of Stoker's kernels (fused_kernels.cu, max_pool_kernels.cu): a few blocks per
// multiprocessor keeps every one busy without launching more blocks than can run.
#ifndef STOKER_TRAINER_NN_MULTIPROCESSORS_H_
#define STOKER_TRAINER_NN_MULTIPROCESSORS_H_

namespace stoker::trainer {

// The current device's multiprocessor count (cudaDevAttrMultiProcessorCount), read from
// the device the first time it is asked for and cached per device; at least 1 (1 when the
// device cannot be asked, and then the kernel launch that follows reports the error).
// Thread-safe.
int CurrentDeviceMultiprocessors();

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_MULTIPROCESSORS_H_
