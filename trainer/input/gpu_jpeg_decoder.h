// GpuJpegDecoder: the trainer's half of deferred samples (Note [Deferred samples] in
// data_service/image/deferred_jpeg.h). It decodes the JPEGs that a batch carries in
// place of pixels with nvJPEG's hardware backend (the GPU's JPEG engines), batched, on a
// stream of its own, and crops, resizes and flips each into its place in the batch's device
// images on the caller's stream, after the decode. libnvjpeg is loaded at run time
// (dlopen): the trainer builds and runs without it, and only a ring with deferred samples
// needs it.
#ifndef STOKER_TRAINER_INPUT_GPU_JPEG_DECODER_H_
#define STOKER_TRAINER_INPUT_GPU_JPEG_DECODER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data_service/ring/ring_client.h"
#include "data_service/ring/wire_types.h"
#include "trainer/input/gpu_decode_refusals.h"

namespace stoker::trainer {

namespace internal {
struct NvjpegState;
}  // namespace internal

// The library that GpuJpegDecoder loads: $STOKER_NVJPEG_LIBRARY if set, else
// libnvjpeg.so.13 from the library path.
std::string NvjpegLibraryName();

// OK when NvjpegLibraryName() loads (and stays loaded); else GpuJpegDecoder::Create's
// FailedPrecondition.
absl::Status CheckNvjpegLoadable();

// Where the prefetch thread's time goes in nvJPEG: batched decodes, how many of them had
// to re-initialise nvJPEG's batch (the number of deferred samples changed), and the host
// time spent in those calls (Note [Decoding waits on the host] in gpu_jpeg_decoder.cc).
struct GpuDecodeTimes {
  int64_t batches = 0;
  int64_t initializations = 0;
  double host_ms = 0.0;
  double longest_host_ms = 0.0;
};

// Owned by one thread (the feeder's prefetch thread). Not thread-safe.
//
//   ASSIGN_OR_RETURN(auto decoder, GpuJpegDecoder::Create(device, batch_size, image_size));
//   ASSIGN_OR_RETURN(std::vector<RefusedJpeg> refused,
//                    decoder->Decode(view, device_images, stream));
class GpuJpegDecoder {
 public:
  // Loads libnvjpeg and creates a hardware-backend decoder on `device` for batches of up
  // to `max_batch` samples of image_size x image_size, whose full-size images take at
  // most `arena_bytes` of device memory at a time (Note [The GPU decode arena] in
  // data_service/image/deferred_jpeg.h). FailedPrecondition, naming the library and how
  // to get it, when it cannot be loaded. Falls back to nvJPEG's default (CUDA) backend,
  // with a warning, on a GPU without JPEG engines.
  static absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> Create(
      int device, int max_batch, int image_size,
      uint64_t arena_bytes = data_service::kDefaultGpuDecodeArenaBytes);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;

  // Decodes every kDeferredJpeg sample of `batch` and enqueues on `stream`, after the decode
  // and after the work already queued there, the writing of each into `device_images`
  // (count x S x S x 3 bytes, HWC) at its position. Pixel samples are not touched. The
  // headers are batch.deferred_headers (the ring client's checked copy); each JPEG is
  // copied once from `batch.images` into the decoder's own pinned memory, which is all
  // nvJPEG reads (Note [Decoding from a private copy] in gpu_jpeg_decoder.cc). Returns the
  // samples nvJPEG refused, with why (their place is left unspecified), in increasing
  // position; errors are CUDA's or nvJPEG's failures that are not one image's fault. A
  // batch whose images need more than the arena is decoded in rounds. Waits for the
  // previous call's work on the host side only as far as needed to reuse its buffers.
  absl::StatusOr<std::vector<RefusedJpeg>> Decode(const data_service::BatchView& batch,
                                                  uint8_t* device_images, cudaStream_t stream);

  // Whether the GPU's JPEG engines decode (false: nvJPEG's CUDA backend).
  bool hardware() const;
  // Images the hardware backend refused that nvJPEG's CUDA backend then decoded (Note
  // [Hardware refusals] in gpu_jpeg_decoder.cc).
  int64_t cuda_backend_decodes() const;
  // What the decodes so far waited for (GpuDecodeTimes).
  GpuDecodeTimes times() const;

 private:
  explicit GpuJpegDecoder(std::unique_ptr<internal::NvjpegState> state);
  std::unique_ptr<internal::NvjpegState> state_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_GPU_JPEG_DECODER_H_
