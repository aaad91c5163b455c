// Stoker's Huffman decoder (jpeg_huffman.h) against libjpeg-turbo's own: it takes exactly
// the single-scan Huffman files, gives libjpeg's pixels on every kind of entropy-coded
// data, at every scale and for cropped and skipped rows, and damaged data either decodes
// to libjpeg's pixels or is refused cleanly.
#include "data_service/image/jpeg_huffman.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

// jpeglib.h needs <cstdio> (FILE, size_t) first.
#include <jpeglib.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/image/decode.h"
#include "data_service/image/test_support.h"
#include "gtest/gtest.h"

namespace stoker::data_service::image {
namespace {

using ::stoker::data_service::image::testing::ReadFileBytes;
using ::stoker::data_service::image::testing::ReadTable;
using ::stoker::data_service::image::testing::RunPythonTool;
using ::stoker::testing::StatusIs;

struct EntropyCase {
  std::string name;
  std::vector<uint8_t> bytes;
  bool installs = false;
};

// make_image_cases.py's "entropy" files, written once per test binary.
const std::vector<EntropyCase>& Cases() {
  static const std::vector<EntropyCase>* const cases = [] {
    auto* out = new std::vector<EntropyCase>();
    // Lives as long as the test binary.
    absl::StatusOr<::stoker::testing::TempDir> made = ::stoker::testing::TempDir::Create("entropy");
    EXPECT_OK(made);
    if (!made.ok()) return out;
    const std::string dir = (new ::stoker::testing::TempDir(std::move(*made)))->path();
    const absl::Status status = RunPythonTool("make_image_cases.py", {"entropy", dir});
    EXPECT_OK(status);
    auto table = ReadTable(dir + "/manifest.txt");
    EXPECT_OK(table);
    if (!table.ok()) return out;
    for (const auto& row : *table) {
      auto bytes = ReadFileBytes(dir + "/" + row[0]);
      EXPECT_OK(bytes);
      if (bytes.ok()) out->push_back(EntropyCase{row[0], *std::move(bytes), row[1] == "1"});
    }
    return out;
  }();
  return *cases;
}

// Decodes `region` of `bytes` at `scale`, with Stoker's Huffman decoder or libjpeg's.
absl::StatusOr<std::vector<uint8_t>> Decode(const std::vector<uint8_t>& bytes, bool fast_huffman,
                                            ScaleFactor scale, const PixelRect* region = nullptr) {
  DecodeOptions options;
  options.dct_scaling = DctScaling::kAll;
  options.fast_huffman = fast_huffman;
  ImageDecoder decoder;
  auto header = decoder.ReadHeader(bytes, options);
  if (!header.ok()) return header.status();
  const PixelRect whole{0, 0, scale.Apply(header->width), scale.Apply(header->height)};
  const PixelRect r = region != nullptr ? *region : whole;
  std::vector<uint8_t> out(static_cast<size_t>(r.width) * r.height * 3, 0);
  absl::Status status = decoder.Decode(scale, r, [&](int y, const uint8_t* rgb) {
    std::memcpy(&out[static_cast<size_t>(y - r.y) * r.width * 3], rgb, r.width * 3);
  });
  if (!status.ok()) return status;
  return out;
}

TEST(JpegHuffmanDecoderTest, TakesExactlyTheSingleScanHuffmanFilesWithoutRestarts) {
  ASSERT_FALSE(Cases().empty());
  internal::JpegHuffmanDecoder huffman;
  for (const EntropyCase& c : Cases()) {
    jpeg_decompress_struct cinfo;
    jpeg_error_mgr err;
    cinfo.err = jpeg_std_error(&err);  // the files are valid: an error ends the test
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, c.bytes.data(), c.bytes.size());
    ASSERT_EQ(jpeg_read_header(&cinfo, TRUE), JPEG_HEADER_OK) << c.name;
    jpeg_start_decompress(&cinfo);
    EXPECT_EQ(huffman.Install(&cinfo), c.installs) << c.name;
    jpeg_destroy_decompress(&cinfo);
  }
}

// A whole decode through the libjpeg API (RGB, or CMYK as stored), with `huffman` installed
// when it is not null; the files are valid, so a libjpeg error ends the test.
std::vector<uint8_t> DecodeWithLibjpeg(const std::vector<uint8_t>& bytes,
                                       internal::JpegHuffmanDecoder* huffman) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), bytes.size());
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    cinfo.out_color_space = JCS_CMYK;
  } else {
    cinfo.out_color_space = JCS_RGB;
  }
  jpeg_start_decompress(&cinfo);
  if (huffman != nullptr) huffman->Install(&cinfo);
  const size_t row_bytes = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  std::vector<uint8_t> out(row_bytes * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.data() + cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

// Note [Replacing libjpeg's entropy decoder]: the baseline x86-64 build and the BMI2 one
// (where this CPU has BMI2) both give libjpeg's pixels.
TEST(JpegHuffmanDecoderTest, BothBuildsGiveLibjpegsPixels) {
  ASSERT_FALSE(Cases().empty());
  internal::JpegHuffmanDecoder baseline(/*allow_bmi2=*/false);
  internal::JpegHuffmanDecoder best;
  EXPECT_FALSE(baseline.uses_bmi2());
  if (!best.uses_bmi2()) std::printf("this CPU has no BMI2: only the baseline build runs\n");
  for (const EntropyCase& c : Cases()) {
    const std::vector<uint8_t> libjpeg = DecodeWithLibjpeg(c.bytes, nullptr);
    EXPECT_TRUE(DecodeWithLibjpeg(c.bytes, &baseline) == libjpeg) << c.name;
    EXPECT_TRUE(DecodeWithLibjpeg(c.bytes, &best) == libjpeg) << c.name;
  }
}

TEST(JpegHuffmanDecoderTest, GivesLibjpegsPixelsAtEveryScale) {
  ASSERT_FALSE(Cases().empty());
  for (const EntropyCase& c : Cases()) {
    // 1/8 reads only the DC coefficients and drops the AC ones.
    for (const ScaleFactor scale : {ScaleFactor{1, 1}, ScaleFactor{7, 8}, ScaleFactor{1, 2},
                                    ScaleFactor{3, 8}, ScaleFactor{1, 8}}) {
      auto ours = Decode(c.bytes, true, scale);
      auto libjpeg = Decode(c.bytes, false, scale);
      ASSERT_OK(ours) << c.name << ": " << ours.status();
      ASSERT_OK(libjpeg) << c.name << ": " << libjpeg.status();
      EXPECT_TRUE(*ours == *libjpeg) << c.name << " at " << scale.num << "/" << scale.denom;
    }
  }
}

TEST(JpegHuffmanDecoderTest, GivesLibjpegsPixelsForCroppedAndSkippedRows) {
  for (const EntropyCase& c : Cases()) {
    for (const PixelRect& r : {PixelRect{0, 0, 203, 40}, PixelRect{17, 33, 120, 91},
                               PixelRect{150, 100, 53, 57}, PixelRect{0, 156, 203, 1}}) {
      auto ours = Decode(c.bytes, true, ScaleFactor{1, 1}, &r);
      auto libjpeg = Decode(c.bytes, false, ScaleFactor{1, 1}, &r);
      ASSERT_OK(ours) << c.name << ": " << ours.status();
      ASSERT_OK(libjpeg) << c.name << ": " << libjpeg.status();
      EXPECT_TRUE(*ours == *libjpeg)
          << c.name << " region " << r.width << "x" << r.height << " at " << r.x << "," << r.y;
    }
  }
}

TEST(JpegHuffmanDecoderTest, ReusedDecoderGivesEachFileItsOwnTables) {
  // The optimised files' tables differ from the standard ones: a decoder that kept the
  // tables of the file before would give other pixels.
  ImageDecoder decoder;
  for (int round = 0; round < 2; ++round) {
    for (const EntropyCase& c : Cases()) {
      auto fresh = Decode(c.bytes, true, ScaleFactor{1, 1});
      ASSERT_OK(fresh);
      auto header = decoder.ReadHeader(c.bytes, DecodeOptions());
      ASSERT_OK(header);
      std::vector<uint8_t> out(static_cast<size_t>(header->width) * header->height * 3);
      ASSERT_TRUE(decoder
                      .Decode(ScaleFactor{1, 1}, PixelRect{0, 0, header->width, header->height},
                              [&](int y, const uint8_t* rgb) {
                                std::memcpy(&out[static_cast<size_t>(y) * header->width * 3], rgb,
                                            header->width * 3);
                              })
                      .ok());
      EXPECT_TRUE(out == *fresh) << c.name;
    }
  }
}

TEST(JpegHuffmanDecoderTest, DamagedDataDecodesLikeLibjpegOrIsRefused) {
  std::mt19937 gen(11);
  int both_decoded = 0;
  int refused = 0;
  for (const EntropyCase& c : Cases()) {
    if (!c.installs) continue;
    // The entropy-coded data starts after the last marker segment of the header (SOS).
    size_t data_start = 0;
    for (size_t i = 0; i + 1 < c.bytes.size(); ++i) {
      if (c.bytes[i] == 0xFF && c.bytes[i + 1] == 0xDA) {
        data_start = i + 2 + (c.bytes[i + 2] << 8 | c.bytes[i + 3]);
        break;
      }
    }
    ASSERT_GT(data_start, 0u) << c.name;
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<uint8_t> bytes = c.bytes;
      const size_t span = bytes.size() - data_start;
      const size_t pos = data_start + gen() % span;
      switch (trial % 4) {
        case 0:
          bytes[pos] ^= static_cast<uint8_t>(1u << (gen() % 8));
          break;
        case 1:
          bytes[pos] = 0xFF;  // a stray marker or fill byte
          break;
        case 2:
          bytes.erase(bytes.begin() + pos,
                      bytes.begin() + pos + std::min<size_t>(9, bytes.size() - pos));
          break;
        default:
          bytes.resize(pos);  // truncated
      }
      auto ours = Decode(bytes, true, ScaleFactor{1, 1});
      auto libjpeg = Decode(bytes, false, ScaleFactor{1, 1});
      if (ours.ok() && libjpeg.ok()) {
        ++both_decoded;
        EXPECT_TRUE(*ours == *libjpeg) << c.name << " trial " << trial;
      } else if (!ours.ok()) {
        ++refused;
        EXPECT_THAT(ours, StatusIs(absl::StatusCode::kInvalidArgument));
      } else {
        ADD_FAILURE() << c.name << " trial " << trial
                      << ": Stoker's decoder accepted a file libjpeg refuses: " << libjpeg.status();
      }
    }
  }
  EXPECT_GT(both_decoded, 0);
  EXPECT_GT(refused, 0);
}

TEST(JpegHuffmanDecoderTest, TruncatedEntropyDataIsRefusedAsLibjpegRefusesIt) {
  for (const EntropyCase& c : Cases()) {
    if (!c.installs) continue;
    std::vector<uint8_t> bytes(c.bytes.begin(), c.bytes.begin() + c.bytes.size() * 6 / 10);
    auto ours = Decode(bytes, true, ScaleFactor{1, 1});
    auto libjpeg = Decode(bytes, false, ScaleFactor{1, 1});
    ASSERT_FALSE(ours.ok()) << c.name;
    ASSERT_FALSE(libjpeg.ok()) << c.name;
    EXPECT_NE(ours.status().message().find("Premature end of JPEG file"), absl::string_view::npos)
        << ours.status();
  }
}

}  // namespace
}  // namespace stoker::data_service::image
