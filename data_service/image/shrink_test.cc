// ShrinkToShortSide against torchvision's transforms.Resize(256) on the same PNGs, and
// ShrinkEncodedImage's JPEG after decoding against the same reference.
#include "data_service/image/shrink.h"

#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "data_service/image/decode.h"
#include "data_service/image/test_support.h"
#include "gtest/gtest.h"

namespace stoker::data_service::image {
namespace {

using ::stoker::testing::StatusIs;

// Tolerances against torchvision's Resize (Pillow's antialiased bilinear): the resampler
// rounds its weights to int16 and may run the passes in the other order (Note
// [Fixed-point weights], Note [Pillow pass order] in resample.h), which moves single
// pixels by a level or two (one, on these images: 54-56 dB). Re-encoding as a 4:2:0 JPEG
// at quality 95 costs more: 35-38 dB on these photo-like images with sensor-like noise.
constexpr int kMaxResizeDiff = 2;
constexpr double kMinResizePsnrDb = 50.0;
constexpr double kMinReencodedPsnrDb = 33.0;

TEST(ShrinkTest, MatchesTorchvisionResize) {
  const std::string& dir = testing::ImageCaseDir("resize");
  absl::StatusOr<std::vector<std::vector<std::string>>> cases =
      testing::ReadTable(dir + "/manifest.txt");
  ASSERT_OK(cases);
  ASSERT_EQ(cases->size(), 5u);
  for (const std::vector<std::string>& c : *cases) {
    SCOPED_TRACE(c[0]);
    const std::vector<uint8_t> png = testing::LoadFileOrFail(dir + "/" + c[0]);
    const std::vector<uint8_t> expected = testing::LoadFileOrFail(dir + "/" + c[0] + ".rgb");
    const int width = std::stoi(c[1]);
    const int height = std::stoi(c[2]);
    absl::StatusOr<DecodedImage> decoded = DecodeImage(png);
    ASSERT_OK(decoded);
    absl::StatusOr<DecodedImage> small = ShrinkToShortSide(*decoded, 256);
    ASSERT_OK(small);
    ASSERT_EQ(small->width, width);
    ASSERT_EQ(small->height, height);
    ASSERT_EQ(expected.size(), small->rgb.size());
    const int diff = testing::MaxAbsDiff(small->rgb.data(), expected.data(), expected.size());
    const double psnr = testing::Psnr(small->rgb.data(), expected.data(), expected.size());
    EXPECT_LE(diff, kMaxResizeDiff);
    EXPECT_GE(psnr, kMinResizePsnrDb);

    absl::StatusOr<std::optional<std::vector<uint8_t>>> jpeg = ShrinkEncodedImage(png, 256, 95);
    ASSERT_OK(jpeg);
    ASSERT_TRUE(jpeg->has_value());
    absl::StatusOr<DecodedImage> reread = DecodeImage(**jpeg);
    ASSERT_OK(reread);
    ASSERT_EQ(reread->width, width);
    ASSERT_EQ(reread->height, height);
    const double reencoded = testing::Psnr(reread->rgb.data(), expected.data(), expected.size());
    EXPECT_GE(reencoded, kMinReencodedPsnrDb);
    std::printf(
        "[ shrink ] %s -> %dx%d: max diff %d, %.1f dB; re-encoded q95 %.1f dB, %zu -> "
        "%zu bytes\n",
        c[0].c_str(), width, height, diff, psnr, reencoded, png.size(), (*jpeg)->size());
  }
}

TEST(ShrinkTest, SmallImagesAreKeptAndBadArgumentsRefused) {
  DecodedImage image;
  image.width = 300;
  image.height = 200;
  image.rgb.assign(300 * 200 * 3, 9);
  absl::StatusOr<DecodedImage> same = ShrinkToShortSide(image, 200);
  ASSERT_OK(same);
  EXPECT_EQ(same->width, 300);
  EXPECT_EQ(same->height, 200);
  EXPECT_THAT(ShrinkToShortSide(image, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::vector<uint8_t>> jpeg = EncodeJpegRgb(image.rgb.data(), 300, 200, 90);
  ASSERT_OK(jpeg);
  absl::StatusOr<std::optional<std::vector<uint8_t>>> kept = ShrinkEncodedImage(*jpeg, 256, 90);
  ASSERT_OK(kept);
  EXPECT_FALSE(kept->has_value()) << "a short side of 200 needs no shrinking to 256";
  EXPECT_THAT(EncodeJpegRgb(image.rgb.data(), 300, 200, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_THAT(ShrinkEncodedImage(text, 256, 90), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stoker::data_service::image
