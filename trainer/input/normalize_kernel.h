// One fused GPU pass from the ring's uint8 NHWC batch to the model's input: normalised
// with a per-channel mean and standard deviation and converted to fp32, fp16 or bf16, in
// channels_last layout (NHWC in memory, which is what a [N, 3, H, W] tensor with
// channels_last strides is).
#ifndef STOKER_TRAINER_INPUT_NORMALIZE_KERNEL_H_
#define STOKER_TRAINER_INPUT_NORMALIZE_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace stoker::trainer {

enum class NormalizedType { kFloat32, kFloat16, kBFloat16 };

// out[p * 3 + c] = (in[p * 3 + c] - 255 * mean[c]) / (255 * stddev[c]) for each of
// `pixels` pixels, as `type`. Enqueued on `stream`; `in` and `out` are device memory.
// Returns the launch's error, if any.
cudaError_t LaunchNormalizeU8(const uint8_t* in, void* out, int64_t pixels, NormalizedType type,
                              const float mean[3], const float stddev[3], cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_NORMALIZE_KERNEL_H_
