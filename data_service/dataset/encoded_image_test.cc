// Tests of encoded_image: reading files and shard ranges into a reused buffer, the
// bad-sample mark on errors that concern the data (and not on option errors), the
// training and evaluation transforms chosen from SampleOptions.
#include "data_service/dataset/encoded_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/image/decode.h"
#include "data_service/image/transforms.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;

TEST(EvalResizeSizeTest, IsTorchvisionsResizeForTheCrop) {
  EXPECT_EQ(EvalResizeSize(224, kDefaultEvalResizeRatio), 256);
  EXPECT_EQ(EvalResizeSize(8, kDefaultEvalResizeRatio), 9);
  EXPECT_EQ(EvalResizeSize(299, kDefaultEvalResizeRatio), 342);
  EXPECT_EQ(EvalResizeSize(224, 1.0), 224);
  EXPECT_EQ(EvalResizeSize(160, 1.25), 200);
}

TEST(ReadImageFileTest, ReadsTheWholeFileIntoAReusedBuffer) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("read_file"));
  const std::string dir = dir_temp.path();
  const std::vector<uint8_t> big(5000, 7), small = {1, 2, 3};
  ASSERT_OK(test_util::WriteFileBytes(dir + "/big.jpg", big));
  ASSERT_OK(test_util::WriteFileBytes(dir + "/small.jpg", small));
  std::vector<uint8_t> buffer;
  auto got = ReadImageFile(dir + "/big.jpg", &buffer);
  ASSERT_OK(got);
  EXPECT_EQ(std::vector<uint8_t>(got->begin(), got->end()), big);
  const uint8_t* data = buffer.data();
  got = ReadImageFile(dir + "/small.jpg", &buffer);
  ASSERT_OK(got);
  EXPECT_EQ(std::vector<uint8_t>(got->begin(), got->end()), small);
  EXPECT_EQ(buffer.data(), data) << "a smaller file must reuse the buffer";
  got = ReadImageFile(dir + "/big.jpg", &buffer);
  ASSERT_OK(got);
  EXPECT_EQ(buffer.data(), data);
}

TEST(ReadImageFileTest, FileErrorsAreBadSamples) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("read_errors"));
  const std::string dir = dir_temp.path();
  std::vector<uint8_t> buffer;
  auto missing = ReadImageFile(dir + "/missing.jpg", &buffer);
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(IsBadSampleError(missing.status()));
  std::filesystem::create_directories(dir + "/folder.jpg");
  auto folder = ReadImageFile(dir + "/folder.jpg", &buffer);
  EXPECT_FALSE(folder.ok());
  EXPECT_TRUE(IsBadSampleError(folder.status())) << folder.status();
  unlink((dir + "/pipe.jpg").c_str());
  ASSERT_EQ(mkfifo((dir + "/pipe.jpg").c_str(), 0600), 0);
  auto fifo = ReadImageFile(dir + "/pipe.jpg", &buffer);  // must not block
  EXPECT_THAT(fifo, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(IsBadSampleError(fifo.status()));
  EXPECT_FALSE(IsBadSampleError(absl::InvalidArgumentError("unmarked")));
  EXPECT_FALSE(IsBadSampleError(absl::OkStatus()));
}

TEST(ReadFileRangeTest, ReadsARangeAndReportsOneThatPassesTheEnd) {
  ASSERT_OK_AND_ASSIGN(const TempDir path_temp, TempDir::Create("read_range"));
  const std::string path = path_temp.path() + "/shard";
  std::vector<uint8_t> content(1000);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i);
  ASSERT_OK(test_util::WriteFileBytes(path, content));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> buffer;
  auto range = ReadFileRange(fd, 100, 50, &buffer);
  ASSERT_OK(range);
  EXPECT_EQ(std::vector<uint8_t>(range->begin(), range->end()),
            std::vector<uint8_t>(content.begin() + 100, content.begin() + 150));
  auto empty = ReadFileRange(fd, 1000, 0, &buffer);
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());
  auto past = ReadFileRange(fd, 990, 20, &buffer);
  EXPECT_THAT(past, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(IsBadSampleError(past.status()));
  EXPECT_NE(past.status().message().find("truncated"), std::string::npos) << past.status();
  close(fd);
}

TEST(DecodeSampleTest, UsesTheTrainingOrEvaluationTransformOfTheOptions) {
  const std::vector<uint8_t> jpeg =
      test_util::JpegBytes(80, 60, test_util::PhotoLikeImage(80, 60, 3));
  SampleScratch scratch;
  image::TransformScratch reference;
  std::vector<uint8_t> got(20 * 20 * 3), want(20 * 20 * 3);
  ASSERT_OK(DecodeSample(jpeg, 11, {20, true, 5, 2}, scratch, got.data()));
  ASSERT_OK(image::DecodeAndTransform(jpeg, image::TransformSpec::Train(20),
                                      image::SampleKey{5, 2, 11}, reference, want.data()));
  EXPECT_EQ(got, want);
  ASSERT_OK(DecodeSample(jpeg, 11, {20, false, 5, 2}, scratch, got.data()));
  ASSERT_OK(image::DecodeAndTransform(jpeg, image::TransformSpec::Eval(23, 20), image::SampleKey{},
                                      reference, want.data()));
  EXPECT_EQ(got, want);
}

// --jpeg_decode: the transforms' fast JPEG reconstruction by default, Pillow's with
// exact_jpeg (the same pixels as DecodeImage's full decode when nothing is resized).
TEST(DecodeSampleTest, ExactJpegSelectsPillowsReconstruction) {
  SampleOptions options{80, false, 0, 0};
  options.eval_resize = 80;
  absl::StatusOr<image::TransformSpec> fast = SampleTransform(options);
  ASSERT_OK(fast);
  EXPECT_TRUE(fast->decode.fast_idct);
  EXPECT_FALSE(fast->decode.fancy_upsampling);
  options.exact_jpeg = true;
  absl::StatusOr<image::TransformSpec> exact = SampleTransform(options);
  ASSERT_OK(exact);
  EXPECT_FALSE(exact->decode.fast_idct);
  EXPECT_TRUE(exact->decode.fancy_upsampling);

  // An 80x80 image through Resize(80) + CenterCrop(80): no resampling, so the sample is
  // the decoder's output itself.
  const std::vector<uint8_t> jpeg =
      test_util::JpegBytes(80, 80, test_util::PhotoLikeImage(80, 80, 9));
  absl::StatusOr<image::DecodedImage> pillow = image::DecodeImage(jpeg);
  ASSERT_OK(pillow);
  SampleScratch scratch;
  std::vector<uint8_t> got(80 * 80 * 3);
  ASSERT_OK(DecodeSample(jpeg, 0, options, scratch, got.data()));
  EXPECT_EQ(got, pillow->rgb);
  options.exact_jpeg = false;
  ASSERT_OK(DecodeSample(jpeg, 0, options, scratch, got.data()));
  EXPECT_NE(got, pillow->rgb);
}

TEST(DecodeSampleTest, BadDataIsABadSampleButBadOptionsAreNot) {
  SampleScratch scratch;
  std::vector<uint8_t> dst(20 * 20 * 3);
  const std::vector<uint8_t> text = {'h', 'i'};
  absl::Status bad = DecodeSample(text, 0, {20, true, 0, 0}, scratch, dst.data());
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(IsBadSampleError(bad)) << bad;
  const std::vector<uint8_t> jpeg =
      test_util::JpegBytes(80, 60, test_util::PhotoLikeImage(80, 60, 4));
  SampleOptions options{20, false, 0, 0};
  options.eval_resize = 10;  // smaller than the crop
  absl::Status bad_options = DecodeSample(jpeg, 0, options, scratch, dst.data());
  EXPECT_THAT(bad_options, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(IsBadSampleError(bad_options)) << bad_options;
  options = {0, true, 0, 0};
  EXPECT_FALSE(IsBadSampleError(DecodeSample(jpeg, 0, options, scratch, dst.data())));
  options = {20, true, 0, 0};
  options.max_pixels = 0;
  EXPECT_FALSE(IsBadSampleError(DecodeSample(jpeg, 0, options, scratch, dst.data())));
}

}  // namespace
}  // namespace stoker::data_service
