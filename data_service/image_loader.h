// LoadImageFile: an image file on disk -> one finished S x S RGB sample, written in place.
// This is the single seam between ImageFolderDataset and decoding: for now it decodes
// JPEG with libjpeg-turbo and centre-crops and resizes bilinearly; the full decoders and
// torchvision-style transforms plug in behind this function.
#ifndef STOKER_DATA_SERVICE_IMAGE_LOADER_H_
#define STOKER_DATA_SERVICE_IMAGE_LOADER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "data_service/dataset.h"

namespace stoker::data_service {

// Decodes the image at `path` (dataset sample `index`) and writes it to `dst` as
// options.image_size squared RGB uint8 HWC. Augmentation randomness, when there is any,
// must come from (options.seed, options.epoch, index) only. NotFound for a missing file,
// InvalidArgument for a corrupt one, Unimplemented for a format this build does not
// decode. Messages name `path`. Thread-safe.
absl::Status LoadImageFile(const std::string& path, int64_t index, const SampleOptions& options,
                           uint8_t* dst);

namespace internal {

// Takes the centred square of side min(width, height) from `src` (RGB, tightly packed)
// and resizes it to size x size into `dst` with bilinear interpolation, sampling at pixel
// centres (align_corners=False). A same-size square is copied exactly.
void CenterCropResize(const uint8_t* src, int width, int height, int size, uint8_t* dst);

}  // namespace internal
}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_IMAGE_LOADER_H_
