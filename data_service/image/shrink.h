// Shrinking images once, ahead of training (pack_imagefolder --max_short_side): torchvision's
// Resize(N) on a whole decoded image (the shorter side becomes N, the longer one
// int(N * long / short), antialiased bilinear as resample.h computes it), and the
// re-encoding of the result as a baseline JPEG.
#ifndef STOKER_DATA_SERVICE_IMAGE_SHRINK_H_
#define STOKER_DATA_SERVICE_IMAGE_SHRINK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data_service/image/decode.h"

namespace stoker::data_service::image {

// `image` resized as torchvision's transforms.Resize(max_short_side) does, or a copy when
// its shorter side is max_short_side or less already. InvalidArgument unless
// max_short_side >= 1.
absl::StatusOr<DecodedImage> ShrinkToShortSide(const DecodedImage& image, int max_short_side);

// `rgb` (width x height x 3) as a baseline 4:2:0 JPEG of `quality` (1..100), the accurate
// DCT: what Pillow's `save(quality=q)` writes.
absl::StatusOr<std::vector<uint8_t>> EncodeJpegRgb(const uint8_t* rgb, int width, int height,
                                                   int quality);

// The encoded image `bytes` decoded (Pillow's reconstruction), shrunk to a shorter side of
// max_short_side and re-encoded at `quality`; nullopt when the image needs no shrinking
// (its shorter side is at most max_short_side) and is best kept byte for byte. Bytes that
// do not decode give their decode error (InvalidArgument).
absl::StatusOr<std::optional<std::vector<uint8_t>>> ShrinkEncodedImage(
    absl::Span<const uint8_t> bytes, int max_short_side, int quality,
    int64_t max_pixels = kDefaultMaxPixels);

}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_SHRINK_H_
