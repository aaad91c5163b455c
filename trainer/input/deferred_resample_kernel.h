// The GPU half of a deferred sample (Note [Deferred samples] in
// data_service/image/deferred_jpeg.h): from a full-size decoded RGB image to the sample,
// with the axis maps the data service chose, the CPU path's filter (deferred_resample.h,
// one thread per output pixel) and the horizontal flip.
#ifndef STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_KERNEL_H_
#define STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_KERNEL_H_

#include <cuda_runtime_api.h>

#include "trainer/input/deferred_resample.h"

namespace stoker::trainer {

// Runs `count` jobs (`jobs` in device memory), each of out_size x out_size pixels, on
// `stream`. Returns the launch's error, if any.
cudaError_t LaunchDeferredResample(const ResampleJob* jobs, int count, int out_size,
                                   cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DEFERRED_RESAMPLE_KERNEL_H_
