// The deferred samples' GPU resample arithmetic (deferred_resample.h), run on the host,
// against the data service's resampler on the same full-size image and axis maps, and
// against the CPU path's whole sample (DecodeAndTransform with Pillow's reconstruction and
// no DCT-domain downscale, which the GPU path does not do and which moves pixels more).
#include "trainer/input/deferred_resample.h"

#include <turbojpeg.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "data_service/image/decode.h"
#include "data_service/image/deferred_jpeg.h"
#include "data_service/image/resample.h"
#include "data_service/image/transforms.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

namespace image = data_service::image;

// One 2-D pass in float against Pillow's two passes with an 8-bit intermediate and int16
// weights: single pixels move by a level or two (measured: at most 1).
constexpr int kMaxDiff = 2;

ResampleAxis AxisOf(const data_service::DeferredAxis& a) {
  return ResampleAxis{a.in0, a.scale, a.out_offset, a.clip_begin, a.clip_end, 0};
}

int MaxDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(DeferredResampleTest, MatchesTheDataServicesResamplerAndCpuPath) {
  for (const auto& [width, height] :
       {std::pair{500, 375}, std::pair{375, 500}, std::pair{1024, 683}, std::pair{200, 150}}) {
    const std::vector<uint8_t> jpeg = data_service::test_util::EncodeJpeg(
        width, height, data_service::test_util::PhotoLikeImage(width, height, width), 90,
        TJSAMP_420, false);
    absl::StatusOr<image::DecodedImage> full = image::DecodeImage(jpeg);  // Pillow's pixels
    ASSERT_TRUE(full.ok()) << full.status();
    int worst_resampler = 0;
    int worst_cpu_path = 0;
    for (image::TransformSpec spec :
         {image::TransformSpec::Train(224), image::TransformSpec::Eval(256, 224)}) {
      image::TransformSpec exact = spec;
      exact.decode = image::DecodeOptions();
      exact.decode.dct_scaling = image::DctScaling::kNone;
      image::TransformScratch scratch;
      for (int64_t index = 0; index < 12; ++index) {
        const image::SampleKey key{99, 1, index};
        std::optional<data_service::DeferredSampleHeader> header =
            image::PlanDeferredJpeg(jpeg, spec, key, size_t{1} << 22);
        ASSERT_TRUE(header.has_value());
        std::vector<uint8_t> gpu_math(224 * 224 * 3);
        ResampleJob job{full->rgb.data(),
                        gpu_math.data(),
                        int64_t{width} * 3,
                        AxisOf(header->x),
                        AxisOf(header->y),
                        header->flip,
                        0};
        ResampleJobOnHost(job, 224);
        std::vector<uint8_t> resampler(224 * 224 * 3);
        image::ResampleImageRgb(full->rgb.data(), width, height, image::FromDeferredAxis(header->x),
                                image::FromDeferredAxis(header->y), header->flip != 0,
                                resampler.data());
        std::vector<uint8_t> cpu_path(224 * 224 * 3);
        ASSERT_TRUE(image::DecodeAndTransform(jpeg, exact, key, scratch, cpu_path.data()).ok());
        worst_resampler = std::max(worst_resampler, MaxDiff(gpu_math, resampler));
        worst_cpu_path = std::max(worst_cpu_path, MaxDiff(gpu_math, cpu_path));
      }
    }
    EXPECT_LE(worst_resampler, kMaxDiff) << width << "x" << height;
    EXPECT_LE(worst_cpu_path, kMaxDiff) << width << "x" << height;
    std::printf("[ resample ] %dx%d: max diff %d from the resampler, %d from the CPU path\n", width,
                height, worst_resampler, worst_cpu_path);
  }
}

TEST(DeferredResampleTest, WindowsFollowPillowsPrecomputeCoeffs) {
  // Downscale by 2.5 of a 100-pixel axis into 40: support 2.5, 5 or 6 taps, clipped at
  // the edges.
  const ResampleAxis axis{0.0, 2.5, 0, 0, 100, 0};
  const AxisWindow first = WindowOf(axis, 0);
  EXPECT_EQ(first.first, 0);
  EXPECT_EQ(first.count, 4);  // centre 1.25: [0, int(1.25 + 2.5 + 0.5)) = [0, 4)
  const AxisWindow last = WindowOf(axis, 39);
  EXPECT_EQ(last.first + last.count, 100);
  float sum = 0.0f;
  const AxisWindow mid = WindowOf(axis, 20);
  for (int i = 0; i < mid.count; ++i) sum += TapWeight(mid, i);
  EXPECT_GT(sum, 0.0f);
  // Upscaling keeps a support of 1: two taps.
  const AxisWindow up = WindowOf(ResampleAxis{0.0, 0.25, 0, 10, 20, 0}, 13);
  EXPECT_LE(up.count, 3);
}

}  // namespace
}  // namespace stoker::trainer
