// ParseJpegFrame's verdicts on the kinds of JPEG a hardware decoder can and cannot take,
// and PlanDeferredJpeg's geometry against the CPU path's (DecodeAndTransform's trace).
#include "data_service/image/deferred_jpeg.h"

#include <turbojpeg.h>

#include <cstring>
#include <vector>

#include "common/testing/status_matchers.h"
#include "data_service/image/transforms.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service::image {
namespace {

using test_util::EncodeJpeg;
using test_util::PhotoLikeImage;

std::vector<uint8_t> Jpeg(int width, int height, int subsampling, bool progressive = false) {
  return EncodeJpeg(width, height, PhotoLikeImage(width, height, 7), 90, subsampling, progressive);
}

TEST(ParseJpegFrameTest, BaselineYCbCrJpegsAreHardwareDecodable) {
  for (int subsampling : {TJSAMP_444, TJSAMP_422, TJSAMP_420}) {
    const std::vector<uint8_t> jpeg = Jpeg(123, 77, subsampling);
    const JpegFrameInfo info = ParseJpegFrame(jpeg);
    EXPECT_TRUE(info.hardware_decodable) << subsampling << ": " << info.why_not;
    EXPECT_EQ(info.width, 123);
    EXPECT_EQ(info.height, 77);
  }
}

TEST(ParseJpegFrameTest, OtherKindsStayOnTheCpu) {
  EXPECT_FALSE(ParseJpegFrame(Jpeg(64, 48, TJSAMP_420, /*progressive=*/true)).hardware_decodable);
  EXPECT_FALSE(ParseJpegFrame(Jpeg(64, 48, TJSAMP_GRAY)).hardware_decodable);
  EXPECT_FALSE(ParseJpegFrame(Jpeg(64, 48, TJSAMP_411)).hardware_decodable);
  EXPECT_FALSE(ParseJpegFrame(Jpeg(64, 48, TJSAMP_440)).hardware_decodable);
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0};
  EXPECT_FALSE(ParseJpegFrame(png).hardware_decodable);
  EXPECT_FALSE(ParseJpegFrame({}).hardware_decodable);
}

TEST(ParseJpegFrameTest, TruncatedOrCorruptJpegsStayOnTheCpu) {
  const std::vector<uint8_t> jpeg = Jpeg(96, 64, TJSAMP_420);
  for (size_t keep : {size_t{3}, size_t{20}, jpeg.size() / 2, jpeg.size() - 2}) {
    const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + keep);
    EXPECT_FALSE(ParseJpegFrame(cut).hardware_decodable) << keep;
  }
  std::vector<uint8_t> garbage = {0xFF, 0xD8, 'h', 'e', 'l', 'l', 'o', 0xFF, 0xD9};
  EXPECT_FALSE(ParseJpegFrame(garbage).hardware_decodable);
}

// The deferred header's geometry is the one DecodeAndTransform() applies to the same
// (bytes, spec, key): the same crop, flip and axis maps, for training and evaluation.
TEST(PlanDeferredJpegTest, GeometryIsTheCpuPathsOwn) {
  const std::vector<uint8_t> jpeg = Jpeg(500, 375, TJSAMP_420);
  const size_t capacity = 224 * 224 * 3;
  std::vector<uint8_t> out(capacity);
  TransformScratch scratch;
  for (const TransformSpec& spec : {TransformSpec::Train(224), TransformSpec::Eval(256, 224)}) {
    for (int64_t index = 0; index < 40; ++index) {
      const SampleKey key{1234, 3, index};
      const std::optional<DeferredSampleHeader> header =
          PlanDeferredJpeg(jpeg, spec, key, capacity);
      ASSERT_TRUE(header.has_value());
      TransformTrace trace;
      ASSERT_OK(DecodeAndTransform(jpeg, spec, key, scratch, out.data(), &trace));
      absl::StatusOr<SampleGeometry> geometry = PlanSampleGeometry(500, 375, spec, &key);
      ASSERT_OK(geometry);
      EXPECT_EQ(FromDeferredAxis(header->x), geometry->x);
      EXPECT_EQ(FromDeferredAxis(header->y), geometry->y);
      EXPECT_EQ(header->flip != 0, geometry->flip);
      EXPECT_EQ(header->width, 500);
      EXPECT_EQ(header->height, 375);
      EXPECT_EQ(header->encoded_bytes, jpeg.size());
      if (spec.mode == TransformMode::kTrain) {
        EXPECT_EQ(header->train, 1);
        EXPECT_EQ(geometry->train.crop.left, trace.train.crop.left);
        EXPECT_EQ(geometry->train.crop.top, trace.train.crop.top);
        EXPECT_EQ(geometry->train.crop.width, trace.train.crop.width);
        EXPECT_EQ(geometry->train.crop.height, trace.train.crop.height);
        EXPECT_EQ(geometry->train.flip, trace.train.flip);
        EXPECT_EQ(header->x.clip_begin, trace.train.crop.left);
        EXPECT_EQ(header->x.clip_end, trace.train.crop.left + trace.train.crop.width);
        EXPECT_EQ(header->y.clip_begin, trace.train.crop.top);
      } else {
        EXPECT_EQ(header->train, 0);
        EXPECT_EQ(header->flip, 0);
        EXPECT_EQ(header->x.out_offset, trace.eval.crop_left);
        EXPECT_EQ(header->y.out_offset, trace.eval.crop_top);
        EXPECT_DOUBLE_EQ(header->x.scale, 500.0 / trace.eval.resized_width);
      }
    }
  }
}

TEST(PlanDeferredJpegTest, RefusesWhatDoesNotFitOrIsTooLarge) {
  const std::vector<uint8_t> jpeg = Jpeg(200, 150, TJSAMP_420);
  const TransformSpec spec = TransformSpec::Train(32);
  const SampleKey key{1, 0, 0};
  absl::string_view why;
  EXPECT_FALSE(PlanDeferredJpeg(jpeg, spec, key, jpeg.size() + 127, &why).has_value());
  EXPECT_EQ(why, "larger than the sample's place in the slot");
  EXPECT_TRUE(PlanDeferredJpeg(jpeg, spec, key, jpeg.size() + 128).has_value());
  TransformSpec small = spec;
  small.decode.max_pixels = 200 * 150 - 1;
  EXPECT_FALSE(PlanDeferredJpeg(jpeg, small, key, 1 << 20, &why).has_value());
  EXPECT_EQ(why, "more pixels than the limit");
  // A header claiming 5000 x 5000 (the marker walk reads no pixels): too large to defer.
  std::vector<uint8_t> large = jpeg;
  for (size_t p = 2; p + 9 < large.size(); ++p) {
    if (large[p] == 0xFF && large[p + 1] == 0xC0) {
      large[p + 5] = 5000 >> 8;
      large[p + 6] = 5000 & 255;
      large[p + 7] = 5000 >> 8;
      large[p + 8] = 5000 & 255;
      break;
    }
  }
  ASSERT_TRUE(ParseJpegFrame(large).hardware_decodable);
  EXPECT_EQ(ParseJpegFrame(large).width, 5000);
  EXPECT_FALSE(PlanDeferredJpeg(large, spec, key, 1 << 20, &why).has_value());
  EXPECT_EQ(why, "more pixels than the GPU path takes");
}

// The slot layout of a deferred sample: the 128-byte header, then the JPEG's bytes.
TEST(PlanDeferredJpegTest, ImagesLargerThanTheArenaStayOnTheCpu) {
  const std::vector<uint8_t> jpeg = Jpeg(64, 48, TJSAMP_420);
  const TransformSpec spec = TransformSpec::Train(32);
  const SampleKey key{1, 0, 3};
  // 64 x 48 decodes to 48 rows of 256 bytes (192 padded): 12288 bytes.
  ASSERT_EQ(DeferredDecodedBytes(64, 48), 12288u);
  absl::string_view why;
  EXPECT_FALSE(PlanDeferredJpeg(jpeg, spec, key, 1 << 20, &why, 12287).has_value());
  EXPECT_EQ(why, "larger, decoded, than the trainer's GPU decode arena");
  EXPECT_TRUE(PlanDeferredJpeg(jpeg, spec, key, 1 << 20, nullptr, 12288).has_value());
}

TEST(WriteDeferredSampleTest, HeaderThenBytes) {
  const std::vector<uint8_t> jpeg = Jpeg(64, 64, TJSAMP_444);
  const std::optional<DeferredSampleHeader> header =
      PlanDeferredJpeg(jpeg, TransformSpec::Train(32), SampleKey{5, 1, 9}, 32 * 32 * 3 * 4);
  ASSERT_TRUE(header.has_value());
  std::vector<uint8_t> place(32 * 32 * 3 * 4, 0xAB);
  WriteDeferredSample(*header, jpeg, place.data());
  DeferredSampleHeader read;
  std::memcpy(&read, place.data(), sizeof(read));
  EXPECT_EQ(read.magic, kDeferredMagic);
  EXPECT_EQ(read.version, kDeferredVersion);
  EXPECT_EQ(read.encoded_bytes, jpeg.size());
  EXPECT_EQ(std::memcmp(place.data() + 128, jpeg.data(), jpeg.size()), 0);
  EXPECT_EQ(place[128 + jpeg.size()], 0xAB);  // nothing written past the JPEG
}

}  // namespace
}  // namespace stoker::data_service::image
