#include "data_service/image/decode.h"

#include <turbojpeg.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "data_service/image/test_support.h"
#include "gtest/gtest.h"

namespace stoker::data_service::image {
namespace {

using ::stoker::data_service::image::testing::ImageCaseDir;
using ::stoker::data_service::image::testing::LoadFileOrFail;
using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

TEST(DetectImageFormatTest, LooksAtTheBytesOnly) {
  const std::vector<uint8_t> jpeg = {0xff, 0xd8, 0xff, 0xe0, 0, 0};
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0};
  EXPECT_EQ(*DetectImageFormat(jpeg), ImageFormat::kJpeg);
  EXPECT_EQ(*DetectImageFormat(png), ImageFormat::kPng);
  const auto empty = DetectImageFormat({});
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  const std::string gif = "GIF89a......";
  const auto other = DetectImageFormat(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(gif.data()), gif.size()));
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GIF")));
}

TEST(ChooseScaleTest, PicksTheSmallestFactorThatStillCoversTheTarget) {
  const std::vector<ScaleFactor> factors = {{1, 1}, {7, 8}, {3, 4}, {5, 8},
                                            {1, 2}, {3, 8}, {1, 4}, {1, 8}};
  EXPECT_EQ(ChooseScale(factors, 500, 341, 375, 256), (ScaleFactor{3, 4}));
  EXPECT_EQ(ChooseScale(factors, 2000, 341, 1500, 256), (ScaleFactor{1, 4}));
  EXPECT_EQ(ChooseScale(factors, 448, 224, 448, 224), (ScaleFactor{1, 2}));  // exact fit
  EXPECT_EQ(ChooseScale(factors, 447, 224, 448, 224), (ScaleFactor{5, 8}));
  EXPECT_EQ(ChooseScale(factors, 100, 224, 5000, 224), (ScaleFactor{1, 1}));  // upscaling
}

TEST(ImageDecoderTest, OffersTheScalesTheOptionsAllow) {
  const std::vector<uint8_t> jpeg = LoadFileOrFail(ImageCaseDir("bad") + "/good.jpg");
  const std::vector<uint8_t> png = LoadFileOrFail(ImageCaseDir("bad") + "/good.png");
  ImageDecoder decoder;
  auto offered = [&](const std::vector<uint8_t>& bytes, DctScaling scaling) {
    DecodeOptions options;
    options.dct_scaling = scaling;
    EXPECT_OK(decoder.ReadHeader(bytes, options));
    std::vector<std::string> out;
    for (const ScaleFactor& s : decoder.scale_factors()) {
      out.push_back(absl::StrCat(s.num, "/", s.denom));
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(offered(jpeg, DctScaling::kNone), V({"1/1"}));
  EXPECT_EQ(offered(jpeg, DctScaling::kPowerOfTwo), V({"1/1", "1/2", "1/4", "1/8"}));
  EXPECT_EQ(offered(jpeg, DctScaling::kAll),
            V({"1/1", "7/8", "3/4", "5/8", "1/2", "3/8", "1/4", "1/8"}));
  EXPECT_EQ(offered(png, DctScaling::kAll), V({"1/1"}));
}

TEST(ImageDecoderTest, DecodesEveryKindOfImageLikePillowConvertRgb) {
  const std::string& dir = ImageCaseDir("formats");
  auto table = testing::ReadTable(dir + "/manifest.txt");
  ASSERT_OK(table);
  ASSERT_GE(table->size(), 19u);
  for (const auto& row : *table) {
    const std::string& name = row[0];
    const std::string& kind = row[1];
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = LoadFileOrFail(dir + "/" + name);
    const std::vector<uint8_t> expected = LoadFileOrFail(dir + "/" + name + ".rgb");
    auto image = DecodeImage(bytes);
    ASSERT_OK(image);
    ASSERT_EQ(image->rgb.size(), expected.size()) << image->width << "x" << image->height;
    const int diff = ::stoker::data_service::image::testing::MaxAbsDiff(
        image->rgb.data(), expected.data(), expected.size());
    // Pillow's libjpeg-turbo (3.x) and Debian's (2.1.5) may round color conversion
    // differently by a level; PNG decoding is exact.
    EXPECT_LE(diff, kind == "jpeg" ? 2 : 0) << kind;
  }
}

TEST(ImageDecoderTest, YcckJpegDecodesLikeTurboJpegCmykThroughPillowsFormula) {
  // TurboJPEG encodes CMYK pixels as YCCK; Pillow cannot write YCCK itself.
  const int w = 45, h = 31;
  std::vector<uint8_t> cmyk(w * h * 4);
  for (int i = 0; i < w * h; ++i) {
    cmyk[i * 4 + 0] = static_cast<uint8_t>(i * 3);
    cmyk[i * 4 + 1] = static_cast<uint8_t>(255 - (i % w) * 5);
    cmyk[i * 4 + 2] = static_cast<uint8_t>((i / w) * 8);
    cmyk[i * 4 + 3] = static_cast<uint8_t>(40 + (i % 7) * 20);
  }
  tjhandle compressor = tjInitCompress();
  ASSERT_NE(compressor, nullptr);
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  ASSERT_EQ(tjCompress2(compressor, cmyk.data(), w, 0, h, TJPF_CMYK, &jpeg, &jpeg_size, TJSAMP_420,
                        95, 0),
            0)
      << tjGetErrorStr2(compressor);
  tjDestroy(compressor);
  std::vector<uint8_t> bytes(jpeg, jpeg + jpeg_size);
  tjFree(jpeg);

  tjhandle decompressor = tjInitDecompress();
  int jw = 0, jh = 0, subsamp = 0, colorspace = 0;
  ASSERT_EQ(tjDecompressHeader3(decompressor, bytes.data(), bytes.size(), &jw, &jh, &subsamp,
                                &colorspace),
            0);
  EXPECT_EQ(colorspace, TJCS_YCCK);
  std::vector<uint8_t> decoded_cmyk(w * h * 4);
  ASSERT_EQ(tjDecompress2(decompressor, bytes.data(), bytes.size(), decoded_cmyk.data(), w, 0, h,
                          TJPF_CMYK, 0),
            0);
  tjDestroy(decompressor);
  std::vector<uint8_t> expected(w * h * 3);
  for (int i = 0; i < w * h; ++i) {
    const int nk = decoded_cmyk[i * 4 + 3];
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - decoded_cmyk[i * 4 + c]) * nk + 128;
      expected[i * 3 + c] = static_cast<uint8_t>(nk - (((tmp >> 8) + tmp) >> 8));
    }
  }
  auto image = DecodeImage(bytes);
  ASSERT_OK(image);
  EXPECT_EQ(image->rgb, expected);
}

TEST(ImageDecoderTest, EveryBadFileIsAClearInvalidArgument) {
  const std::string& dir = ImageCaseDir("bad");
  auto table = testing::ReadTable(dir + "/manifest.txt");
  ASSERT_OK(table);
  // Besides the empty file, which has no manifest field issue.
  const std::map<std::string, std::string> expected_words = {
      {"empty.jpg", "empty file"},
      {"text.jpg", "not a JPEG or PNG"},
      {"gif.jpg", "GIF"},
      {"truncated.jpg", "Premature end of JPEG file"},
      {"truncated_header.jpg", "invalid JPEG header"},
      {"soi_only.jpg", "invalid JPEG header"},
      {"corrupt_header.jpg", "precision"},
      {"corrupt_huffman.jpg", "Huffman"},
      {"corrupt_scan.jpg", "Corrupt JPEG data"},
      {"bomb.jpg", "decompression bomb"},
      {"bomb.png", "decompression bomb"},
      {"truncated.png", "truncated"},
      {"bad_crc.png", "CRC"},
      {"png_signature_only.png", "truncated"},
  };
  ASSERT_EQ(table->size(), expected_words.size());
  for (const auto& row : *table) {
    const std::string& name = row[0];
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = LoadFileOrFail(dir + "/" + name);
    auto image = DecodeImage(bytes);
    ASSERT_FALSE(image.ok());
    EXPECT_THAT(image, StatusIs(absl::StatusCode::kInvalidArgument));
    ASSERT_TRUE(expected_words.count(name));
    EXPECT_TRUE(absl::StrContains(image.status().message(), expected_words.at(name)))
        << image.status();
  }
}

// Note [JPEG warnings]: stray bytes before the EOI marker or between header segments
// leave the pixels intact and are tolerated.
TEST(ImageDecoderTest, StrayBytesOutsideTheImageDataAreTolerated) {
  const std::vector<uint8_t> good = LoadFileOrFail(ImageCaseDir("bad") + "/good.jpg");
  auto reference = DecodeImage(good);
  ASSERT_OK(reference);
  ASSERT_GE(good.size(), 4u);
  ASSERT_EQ(good[good.size() - 2], 0xff);
  ASSERT_EQ(good[good.size() - 1], 0xd9);
  std::vector<uint8_t> before_eoi(good.begin(), good.end() - 2);
  before_eoi.insert(before_eoi.end(), {0x12, 0x34, 0x56, 0x00, 0xff, 0xd9});
  auto image = DecodeImage(before_eoi);
  ASSERT_OK(image);
  EXPECT_EQ(image->rgb, reference->rgb);
  // Junk between the first two header segments (after SOI and APP0).
  const size_t app0_end = 4 + ((size_t{good[4]} << 8) | good[5]);
  std::vector<uint8_t> in_header(good.begin(), good.begin() + app0_end);
  in_header.insert(in_header.end(), {0x00, 0x01, 0x02});
  in_header.insert(in_header.end(), good.begin() + app0_end, good.end());
  image = DecodeImage(in_header);
  ASSERT_OK(image);
  EXPECT_EQ(image->rgb, reference->rgb);
}

TEST(ImageDecoderTest, PixelLimitIsCheckedFromTheHeader) {
  const std::vector<uint8_t> bytes =
      LoadFileOrFail(ImageCaseDir("bad") + "/good.jpg");  // 160 x 120
  DecodeOptions options;
  options.max_pixels = 160 * 120;
  EXPECT_OK(DecodeImage(bytes, options));
  options.max_pixels = 160 * 120 - 1;
  const auto refused = DecodeImage(bytes, options);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("160x120")));
}

TEST(ImageDecoderTest, DecodeWithoutHeaderIsFailedPrecondition) {
  ImageDecoder decoder;
  const absl::Status status =
      decoder.Decode(ScaleFactor{1, 1}, PixelRect{0, 0, 1, 1}, [](int, const uint8_t*) {});
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Decodes `region` of `bytes` at `scale` into a dense buffer.
absl::Status DecodeRegion(ImageDecoder& decoder, const std::vector<uint8_t>& bytes,
                          ScaleFactor scale, const PixelRect& region, std::vector<uint8_t>* out,
                          bool fast = false) {
  DecodeOptions options = fast ? FastDecodeOptions() : DecodeOptions();
  options.dct_scaling = DctScaling::kAll;
  auto header = decoder.ReadHeader(bytes, options);
  if (!header.ok()) return header.status();
  out->assign(static_cast<size_t>(region.width) * region.height * 3, 0);
  int expected_y = region.y;
  bool in_order = true;
  absl::Status status = decoder.Decode(scale, region, [&](int y, const uint8_t* rgb) {
    in_order = in_order && y == expected_y++;
    std::memcpy(&(*out)[static_cast<size_t>(y - region.y) * region.width * 3], rgb,
                region.width * 3);
  });
  if (status.ok() && (!in_order || expected_y != region.y + region.height)) {
    return absl::InternalError("rows missing or out of order");
  }
  return status;
}

// A JPEG of a smooth pattern in one of TurboJPEG's chroma subsamplings.
std::vector<uint8_t> EncodeJpeg(int width, int height, int subsampling, int flags = 0) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / width);
      p[1] = static_cast<uint8_t>((x * y) % 251);
      p[2] = static_cast<uint8_t>(((x / 5 + y / 7) % 2) * 200);
    }
  }
  tjhandle compressor = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(compressor, rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size,
                        subsampling, 90, flags),
            0);
  tjDestroy(compressor);
  std::vector<uint8_t> bytes(jpeg, jpeg + size);
  tjFree(jpeg);
  return bytes;
}

// Note [libjpeg API for partial decode] and Note [Crop margin] in decode.cc: cropping and
// skipping must give exactly the pixels of a full decode at the same scale, for every
// scale and chroma subsampling, with Pillow's reconstruction and with the fast one
// (Note [Fast JPEG reconstruction]).
class RegionDecodeTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(Reconstruction, RegionDecodeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Fast" : "Pillow");
                         });

TEST_P(RegionDecodeTest, RegionDecodeEqualsTheSameRegionOfAFullDecode) {
  const bool fast = GetParam();
  const std::string& dir = ImageCaseDir("formats");
  std::vector<std::pair<std::string, std::vector<uint8_t>>> cases;
  for (const char* name : {"rgb420.jpg", "rgb422.jpg", "rgb444.jpg", "progressive.jpg", "gray.jpg",
                           "cmyk.jpg", "odd.jpg", "rgb.png", "interlaced.png"}) {
    cases.emplace_back(name, LoadFileOrFail(dir + "/" + name));
  }
  cases.emplace_back("turbojpeg 4:4:0", EncodeJpeg(83, 61, TJSAMP_440));
  cases.emplace_back("turbojpeg 4:1:1", EncodeJpeg(83, 61, TJSAMP_411));
  std::mt19937 gen(11);
  ImageDecoder decoder;
  DecodeOptions all_scales = fast ? FastDecodeOptions() : DecodeOptions();
  all_scales.dct_scaling = DctScaling::kAll;
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    auto header = decoder.ReadHeader(bytes, all_scales);
    ASSERT_OK(header);
    const std::vector<ScaleFactor> factors(decoder.scale_factors().begin(),
                                           decoder.scale_factors().end());
    if (header->format == ImageFormat::kJpeg) {
      EXPECT_EQ(factors.size(), 8u);
    }
    for (const ScaleFactor& s : factors) {
      SCOPED_TRACE(absl::StrCat(s.num, "/", s.denom));
      const int sw = s.Apply(header->width);
      const int sh = s.Apply(header->height);
      std::vector<uint8_t> full;
      ASSERT_OK(DecodeRegion(decoder, bytes, s, PixelRect{0, 0, sw, sh}, &full, fast));
      for (int trial = 0; trial < 40; ++trial) {
        PixelRect r;
        r.x = std::uniform_int_distribution<int>(0, sw - 1)(gen);
        r.y = std::uniform_int_distribution<int>(0, sh - 1)(gen);
        r.width = std::uniform_int_distribution<int>(1, sw - r.x)(gen);
        r.height = std::uniform_int_distribution<int>(1, sh - r.y)(gen);
        std::vector<uint8_t> part;
        const absl::Status status = DecodeRegion(decoder, bytes, s, r, &part, fast);
        ASSERT_OK(status);
        for (int y = 0; y < r.height; ++y) {
          const uint8_t* want = &full[(static_cast<size_t>(r.y + y) * sw + r.x) * 3];
          ASSERT_EQ(std::memcmp(&part[static_cast<size_t>(y) * r.width * 3], want, r.width * 3), 0)
              << "row " << r.y + y << " of region " << r.width << "x" << r.height << " at (" << r.x
              << "," << r.y << ")";
        }
      }
    }
  }
}

// Decode(..., keep_rows): every row handed over is still intact keep_rows rows later.
TEST(ImageDecoderTest, KeptRowsStayValidForTheRowsPromised) {
  const std::string& dir = ImageCaseDir("formats");
  ImageDecoder decoder;
  for (const char* name :
       {"rgb420.jpg", "progressive.jpg", "cmyk.jpg", "rgb.png", "interlaced.png"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = LoadFileOrFail(dir + "/" + name);
    auto header = decoder.ReadHeader(bytes, DecodeOptions{});
    ASSERT_OK(header);
    std::vector<uint8_t> full;
    ASSERT_OK(DecodeRegion(decoder, bytes, ScaleFactor{1, 1},
                           PixelRect{0, 0, header->width, header->height}, &full));
    for (int keep : {0, 1, 3, 9}) {
      SCOPED_TRACE(keep);
      const PixelRect r{3, 5, header->width - 7, header->height - 9};
      ASSERT_OK(decoder.ReadHeader(bytes, DecodeOptions{}));
      std::vector<const uint8_t*> seen;
      bool intact = true;
      const absl::Status status = decoder.Decode(
          ScaleFactor{1, 1}, r,
          [&](int y, const uint8_t* rgb) {
            seen.push_back(rgb);
            // This row and the `keep` before it still hold their pixels.
            for (int back = 0; back <= keep && back < static_cast<int>(seen.size()); ++back) {
              const int row = y - back;
              const uint8_t* want = &full[(static_cast<size_t>(row) * header->width + r.x) * 3];
              if (std::memcmp(seen[seen.size() - 1 - back], want, r.width * 3) != 0) {
                intact = false;
              }
            }
          },
          keep);
      ASSERT_OK(status);
      EXPECT_EQ(static_cast<int>(seen.size()), r.height);
      EXPECT_TRUE(intact);
    }
  }
}

TEST(ImageDecoderTest, StaysUsableAfterErrors) {
  const std::string& bad = ImageCaseDir("bad");
  const std::vector<uint8_t> good_jpeg = LoadFileOrFail(bad + "/good.jpg");
  const std::vector<uint8_t> good_png = LoadFileOrFail(bad + "/good.png");
  auto fresh_jpeg = DecodeImage(good_jpeg);
  auto fresh_png = DecodeImage(good_png);
  ASSERT_TRUE(fresh_jpeg.ok() && fresh_png.ok());
  ImageDecoder decoder;
  std::vector<uint8_t> out;
  for (const char* name : {"truncated.jpg", "corrupt_huffman.jpg", "truncated.png", "bad_crc.png",
                           "bomb.jpg", "corrupt_scan.jpg"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = LoadFileOrFail(bad + "/" + name);
    auto header = decoder.ReadHeader(bytes, DecodeOptions());
    if (header.ok()) {
      EXPECT_FALSE(decoder
                       .Decode(ScaleFactor{1, 1}, PixelRect{0, 0, header->width, header->height},
                               [](int, const uint8_t*) {})
                       .ok());
    }
    ASSERT_OK(DecodeRegion(decoder, good_jpeg, ScaleFactor{1, 1}, PixelRect{0, 0, 160, 120}, &out));
    EXPECT_EQ(out, fresh_jpeg->rgb);
    ASSERT_OK(DecodeRegion(decoder, good_png, ScaleFactor{1, 1}, PixelRect{0, 0, 64, 48}, &out));
    EXPECT_EQ(out, fresh_png->rgb);
  }
}

// `jpeg` without its Huffman tables (DHT segments), as motion-JPEG frames come: a decoder
// must use the standard tables for them.
std::vector<uint8_t> WithoutHuffmanTables(const std::vector<uint8_t>& jpeg) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);  // SOI
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i + 1] != 0xDA) {  // up to SOS
    const size_t length = (static_cast<size_t>(jpeg[i + 2]) << 8) | jpeg[i + 3];
    if (jpeg[i + 1] != 0xC4) out.insert(out.end(), jpeg.begin() + i, jpeg.begin() + i + 2 + length);
    i += 2 + length;
  }
  out.insert(out.end(), jpeg.begin() + i, jpeg.end());
  return out;
}

// Note [One decompressor per image]: libjpeg keeps the tables of the previous image, so a
// reused decoder read a file that relies on the standard Huffman tables with the optimised
// ones of the image before (found by fuzz/image_decode_fuzzer.cc).
TEST(ImageDecoderTest, EachImageIsDecodedWithItsOwnTables) {
  const std::vector<uint8_t> optimised = EncodeJpeg(83, 61, TJSAMP_420, TJFLAG_PROGRESSIVE);
  const std::vector<uint8_t> standard = WithoutHuffmanTables(EncodeJpeg(83, 61, TJSAMP_420));
  auto fresh = DecodeImage(standard);
  ASSERT_OK(fresh);
  ImageDecoder decoder;
  std::vector<uint8_t> out;
  ASSERT_OK(DecodeRegion(decoder, optimised, ScaleFactor{1, 1}, PixelRect{0, 0, 83, 61}, &out));
  const absl::Status second =
      DecodeRegion(decoder, standard, ScaleFactor{1, 1}, PixelRect{0, 0, 83, 61}, &out);
  ASSERT_OK(second);
  EXPECT_EQ(out, fresh->rgb);
}

// A small deterministic fuzz run: mutated JPEGs and PNGs must decode or fail cleanly.
TEST(ImageDecoderTest, MutatedFilesNeverCrash) {
  const std::string& bad = ImageCaseDir("bad");
  std::mt19937 gen(5);
  int failures = 0;
  int successes = 0;
  for (const char* name : {"good.jpg", "good.png"}) {
    const std::vector<uint8_t> good = LoadFileOrFail(bad + "/" + name);
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<uint8_t> bytes = good;
      const int kind = trial % 4;
      const int mutations = 1 + static_cast<int>(gen() % 8);
      for (int m = 0; m < mutations; ++m) {
        const size_t pos = gen() % bytes.size();
        if (kind == 0) {
          bytes[pos] ^= static_cast<uint8_t>(1u << (gen() % 8));
        } else if (kind == 1) {
          bytes[pos] = static_cast<uint8_t>(gen());
        } else if (kind == 2) {
          bytes.insert(bytes.begin() + pos, static_cast<uint8_t>(gen()));
        } else {
          bytes.resize(std::max<size_t>(1, pos));
        }
      }
      DecodeOptions options;
      options.max_pixels = 4000 * 4000;
      auto image = DecodeImage(bytes, options);
      if (image.ok()) {
        ++successes;
        EXPECT_EQ(image->rgb.size(), static_cast<size_t>(image->width) * image->height * 3);
      } else {
        ++failures;
        EXPECT_THAT(image, StatusIs(absl::StatusCode::kInvalidArgument));
      }
    }
  }
  EXPECT_GT(failures, 0);
  EXPECT_GT(successes, 0);
}

}  // namespace
}  // namespace stoker::data_service::image
