// Tests of LoadImageFile (JPEG decode, centre crop, bilinear resize) and its errors.
#include "data_service/image_loader.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

std::vector<uint8_t> Constant(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> image(width * height * 3);
  for (size_t i = 0; i < image.size(); i += 3) image[i] = r, image[i + 1] = g, image[i + 2] = b;
  return image;
}

// Left third red, middle third green, right third blue.
std::vector<uint8_t> ThreeBands(int width, int height) {
  std::vector<uint8_t> image(width * height * 3, 0);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image[(y * width + x) * 3 + (x * 3 / width)] = 255;
    }
  }
  return image;
}

TEST(CenterCropResizeTest, CopiesASameSizeSquareExactly) {
  std::vector<uint8_t> src(9 * 9 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 37);
  std::vector<uint8_t> dst(src.size());
  internal::CenterCropResize(src.data(), 9, 9, 9, dst.data());
  EXPECT_EQ(src, dst);
}

TEST(CenterCropResizeTest, KeepsAConstantImageConstant) {
  std::vector<uint8_t> src = Constant(40, 25, 10, 200, 77);
  for (int size : {1, 5, 25, 64}) {
    std::vector<uint8_t> dst(size * size * 3);
    internal::CenterCropResize(src.data(), 40, 25, size, dst.data());
    EXPECT_EQ(dst, Constant(size, size, 10, 200, 77)) << size;
  }
}

TEST(CenterCropResizeTest, TakesTheCentralSquare) {
  std::vector<uint8_t> src = ThreeBands(30, 10);  // the middle 10x10 square is green
  std::vector<uint8_t> dst(4 * 4 * 3);
  internal::CenterCropResize(src.data(), 30, 10, 4, dst.data());
  EXPECT_EQ(dst, Constant(4, 4, 0, 255, 0));
}

TEST(CenterCropResizeTest, InterpolatesBilinearlyAtPixelCentres) {
  // 2x2 -> 4x4 (align_corners=False): output pixel 1 samples at 0.25 between the inputs.
  const std::vector<uint8_t> src = {0, 0, 0, 100, 100, 100, 0, 0, 0, 100, 100, 100};
  std::vector<uint8_t> dst(4 * 4 * 3);
  internal::CenterCropResize(src.data(), 2, 2, 4, dst.data());
  EXPECT_EQ(dst[0], 0);
  EXPECT_EQ(dst[3], 25);
  EXPECT_EQ(dst[6], 75);
  EXPECT_EQ(dst[9], 100);
}

TEST(LoadImageFileTest, DecodesAJpegAndCropsItsCentre) {
  const std::string path = test_util::TestDirectory("loader") + "/bands.jpg";
  ASSERT_TRUE(test_util::WriteJpeg(path, 96, 32, ThreeBands(96, 32)).ok());
  std::vector<uint8_t> dst(8 * 8 * 3);
  ASSERT_TRUE(LoadImageFile(path, 0, {8, false, 0, 0}, dst.data()).ok());
  for (int i = 0; i < 64; ++i) {
    EXPECT_LT(dst[i * 3], 40) << i;
    EXPECT_GT(dst[i * 3 + 1], 215) << i;
    EXPECT_LT(dst[i * 3 + 2], 40) << i;
  }
}

TEST(LoadImageFileTest, ErrorsNameTheFile) {
  const std::string dir = test_util::TestDirectory("loader_errors");
  std::vector<uint8_t> dst(4 * 4 * 3);
  auto missing = LoadImageFile(dir + "/missing.jpg", 0, {4, true, 0, 0}, dst.data());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("missing.jpg"), std::string::npos);

  const std::string corrupt = dir + "/corrupt.jpg";
  FILE* f = std::fopen(corrupt.c_str(), "wb");
  std::fputs("\xff\xd8\xff\xe0 this is not a jpeg at all", f);
  std::fclose(f);
  auto bad = LoadImageFile(corrupt, 0, {4, true, 0, 0}, dst.data());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("corrupt.jpg"), std::string::npos);

  const std::string png = dir + "/image.png";
  f = std::fopen(png.c_str(), "wb");
  std::fputs("\x89PNG\r\n\x1a\n", f);
  std::fclose(f);
  auto unsupported = LoadImageFile(png, 0, {4, true, 0, 0}, dst.data());
  EXPECT_EQ(unsupported.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(unsupported.message().find("image.png"), std::string::npos);

  EXPECT_EQ(LoadImageFile(corrupt, 0, {0, true, 0, 0}, dst.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::data_service
