#include "data_service/image/shrink.h"

#include <turbojpeg.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "data_service/image/resample.h"

namespace stoker::data_service::image {

absl::StatusOr<DecodedImage> ShrinkToShortSide(const DecodedImage& image, int max_short_side) {
  if (max_short_side < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_short_side must be at least 1, got ", max_short_side));
  }
  const int64_t short_side = std::min(image.width, image.height);
  const int64_t long_side = std::max(image.width, image.height);
  if (short_side <= max_short_side) return image;
  // torchvision: int(size * long / short), a true division then truncation.
  const int new_long = static_cast<int>(static_cast<double>(max_short_side * long_side) /
                                        static_cast<double>(short_side));
  DecodedImage out;
  out.width = image.width <= image.height ? max_short_side : new_long;
  out.height = image.width <= image.height ? new_long : max_short_side;
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  const AxisMap x{0.0, static_cast<double>(image.width) / out.width, 0, out.width, 0, image.width};
  const AxisMap y{0.0,         static_cast<double>(image.height) / out.height, 0, out.height, 0,
                  image.height};
  ResampleImageRgb(image.rgb.data(), image.width, image.height, x, y, false, out.rgb.data());
  return out;
}

absl::StatusOr<std::vector<uint8_t>> EncodeJpegRgb(const uint8_t* rgb, int width, int height,
                                                   int quality) {
  if (quality < 1 || quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG quality must be in 1..100, got ", quality));
  }
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
  if (handle == nullptr) return absl::ResourceExhaustedError("tjInitCompress failed");
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  if (tjCompress2(handle.get(), rgb, width, 0, height, TJPF_RGB, &jpeg, &size, TJSAMP_420, quality,
                  TJFLAG_ACCURATEDCT) != 0) {
    if (jpeg != nullptr) tjFree(jpeg);
    return absl::InternalError(
        absl::StrCat("JPEG encoding failed: ", tjGetErrorStr2(handle.get())));
  }
  std::vector<uint8_t> out(jpeg, jpeg + size);
  tjFree(jpeg);
  return out;
}

absl::StatusOr<std::optional<std::vector<uint8_t>>> ShrinkEncodedImage(
    absl::Span<const uint8_t> bytes, int max_short_side, int quality, int64_t max_pixels) {
  DecodeOptions options;  // Pillow's reconstruction
  options.max_pixels = max_pixels;
  absl::StatusOr<DecodedImage> decoded = DecodeImage(bytes, options);
  if (!decoded.ok()) return decoded.status();
  if (std::min(decoded->width, decoded->height) <= max_short_side) {
    return std::optional<std::vector<uint8_t>>();
  }
  absl::StatusOr<DecodedImage> small = ShrinkToShortSide(*decoded, max_short_side);
  if (!small.ok()) return small.status();
  absl::StatusOr<std::vector<uint8_t>> jpeg =
      EncodeJpegRgb(small->rgb.data(), small->width, small->height, quality);
  if (!jpeg.ok()) return jpeg.status();
  return std::optional<std::vector<uint8_t>>(std::move(*jpeg));
}

}  // namespace stoker::data_service::image
