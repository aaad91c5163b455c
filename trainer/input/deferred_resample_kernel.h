// The GPU half of a deferred sample (Note [Deferred samples] in
// data_service/image/deferred_jpeg.h): from a full-size decoded RGB image to the sample,
// with the axis maps the data service chose, the same antialiased bilinear (triangle)
// filter as the CPU path's resampler (Pillow's precompute_coeffs, here in one 2-D pass
// in float instead of two 8-bit-rounded passes), and the horizontal flip.
#ifndef STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_KERNEL_H_
#define STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace stoker::trainer {

// One axis, as data_service's DeferredAxis: output pixel k is centred at source
// coordinate clip_begin + in0 + (k + out_offset + 0.5) * scale; the filter reads source
// pixels [clip_begin, clip_end) only.
struct ResampleAxis {
  double in0;
  double scale;
  int32_t out_offset;
  int32_t clip_begin;
  int32_t clip_end;
  int32_t reserved;
};

// One sample: `src` (device) is a decoded image of rows `src_pitch` bytes apart, 3 bytes
// per pixel, RGB; `dst` (device) receives out_size x out_size x 3 bytes, HWC.
struct ResampleJob {
  const uint8_t* src;
  uint8_t* dst;
  int64_t src_pitch;
  ResampleAxis x;
  ResampleAxis y;
  int32_t flip;
  int32_t reserved;
};

// Runs `count` jobs (`jobs` in device memory), each of out_size x out_size pixels, on
// `stream`. Returns the launch's error, if any.
cudaError_t LaunchDeferredResample(const ResampleJob* jobs, int count, int out_size,
                                   cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_KERNEL_H_
