#include "trainer/input/make_feeder.h"

#ifdef STOKER_WITH_CUDA
#include "trainer/input/cuda_batch_feeder.h"
#include "trainer/input/gpu_jpeg_decoder.h"
#endif

namespace stoker::trainer {

absl::StatusOr<std::unique_ptr<BatchFeeder>> MakeBatchFeeder(BatchSource* source,
                                                             const FeederOptions& options,
                                                             at::Device device) {
  if (device.is_cpu()) return MakeCpuBatchFeeder(source, options);
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) return MakeCudaBatchFeeder(source, options, device.index());
#endif
  return absl::UnimplementedError("no batch feeder for this device in this build");
}

absl::Status CheckGpuJpegDecode(at::Device device) {
  if (!device.is_cuda()) return absl::FailedPreconditionError("JPEGs are decoded on a GPU only");
#ifdef STOKER_WITH_CUDA
  return CheckNvjpegLoadable();
#else
  return absl::FailedPreconditionError("this build has no CUDA");
#endif
}

}  // namespace stoker::trainer
