#include "data_service/image/resample.h"

#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::data_service::image {
namespace {

std::vector<uint8_t> Ramp(int width, int height) {
  std::vector<uint8_t> img(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &img[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 7 + y);
      p[1] = static_cast<uint8_t>(y * 5);
      p[2] = static_cast<uint8_t>((x * y) & 255);
    }
  }
  return img;
}

AxisMap Whole(int in, int out) {
  return AxisMap{0.0, static_cast<double>(in) / out, 0, out, 0, in};
}

TEST(ResampleTest, Avx2AndBaselineColumnPassesAgreeByteForByte) {
  if (!internal::ColumnPassHasAvx2()) GTEST_SKIP() << "needs a CPU with AVX2";
  std::mt19937 rng(7);
  for (int taps = 1; taps <= 11; ++taps) {
    for (int n : {1, 15, 16, 17, 47, 300, 1311}) {
      std::vector<std::vector<uint8_t>> rows(taps, std::vector<uint8_t>(n));
      std::vector<const uint8_t*> pointers;
      for (auto& row : rows) {
        for (uint8_t& v : row) v = static_cast<uint8_t>(rng());
        pointers.push_back(row.data());
      }
      for (int bits : {8, 12, 15}) {
        std::vector<int16_t> weights(taps);
        int sum = 0;
        for (int t = 0; t < taps; ++t) {
          // Mostly positive weights summing to about 1, with the odd negative one and the
          // extremes, so that sums saturate at both ends too.
          weights[t] = static_cast<int16_t>(static_cast<int>(rng() % (1 << bits)) / taps -
                                            (t == 2 ? (1 << bits) / 4 : 0));
          sum += weights[t];
        }
        if (taps == 1) weights[0] = static_cast<int16_t>((1 << bits) - 1);
        if (taps == 4) weights[3] = static_cast<int16_t>(std::min(32767, (1 << bits) * 2));
        std::vector<uint8_t> baseline(n), avx2(n);
        internal::ColumnPassForTesting(false, pointers.data(), weights.data(), taps, bits, n,
                                       baseline.data());
        internal::ColumnPassForTesting(true, pointers.data(), weights.data(), taps, bits, n,
                                       avx2.data());
        ASSERT_EQ(baseline, avx2) << taps << " taps, n " << n << ", " << bits << " bits, sum "
                                  << sum;
      }
    }
  }
}

TEST(ResampleTest, SameSizeIsACopy) {
  const auto img = Ramp(17, 9);
  std::vector<uint8_t> out(img.size());
  ResampleImageRgb(img.data(), 17, 9, Whole(17, 17), Whole(9, 9), false, out.data());
  EXPECT_EQ(out, img);
}

TEST(ResampleTest, SameSizeIsAnExactCopyOfAnyImage) {
  std::mt19937 rng(3);
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{70, 45}, {8, 8}, {9, 23}, {64, 1}}) {
    std::vector<uint8_t> img(static_cast<size_t>(w) * h * 3);
    for (uint8_t& v : img) v = static_cast<uint8_t>(rng());
    std::vector<uint8_t> out(img.size()), mirrored(img.size());
    ResampleImageRgb(img.data(), w, h, Whole(w, w), Whole(h, h), false, out.data());
    EXPECT_EQ(out, img) << w << "x" << h;
    ResampleImageRgb(img.data(), w, h, Whole(w, w), Whole(h, h), true, mirrored.data());
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(mirrored[(y * w + x) * 3 + c], img[(y * w + (w - 1 - x)) * 3 + c])
              << w << "x" << h << " at " << x << "," << y;
        }
      }
    }
  }
}

TEST(ResampleTest, MirrorReversesEachRow) {
  const auto img = Ramp(17, 9);
  std::vector<uint8_t> out(img.size());
  ResampleImageRgb(img.data(), 17, 9, Whole(17, 17), Whole(9, 9), true, out.data());
  for (int y = 0; y < 9; ++y) {
    for (int x = 0; x < 17; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(out[(y * 17 + x) * 3 + c], img[(y * 17 + (16 - x)) * 3 + c]);
      }
    }
  }
}

TEST(ResampleTest, ConstantImageStaysConstantUnderAnyScale) {
  std::vector<uint8_t> img(50 * 40 * 3, 173);
  for (int out_w : {1, 7, 33, 50, 91}) {
    for (int out_h : {1, 12, 40, 77}) {
      std::vector<uint8_t> out(out_w * out_h * 3);
      ResampleImageRgb(img.data(), 50, 40, Whole(50, out_w), Whole(40, out_h), false, out.data());
      for (uint8_t v : out) ASSERT_EQ(v, 173) << out_w << "x" << out_h;
    }
  }
}

TEST(ResampleTest, HalvingUsesTheWidenedTriangle) {
  // 4 -> 2 pixels: support 2, output 0 centred at 1.0 reads pixels 0..2 with triangle
  // weights 0.75, 0.75, 0.25 (normalised: 3/7, 3/7, 1/7), as Pillow does.
  std::vector<uint8_t> img = {0, 0, 0, 70, 70, 70, 140, 140, 140, 210, 210, 210};
  std::vector<uint8_t> out(2 * 3);
  ResampleImageRgb(img.data(), 4, 1, Whole(4, 2), Whole(1, 1), false, out.data());
  EXPECT_EQ(out[0], 50);   // (0 * 3 + 70 * 3 + 140) / 7
  EXPECT_EQ(out[3], 160);  // (70 + 140 * 3 + 210 * 3) / 7
}

TEST(ResampleTest, TapsStayInsideTheClipRangeAndSumToOne) {
  AxisTaps taps;
  for (double scale : {0.3, 1.0, 1.7, 4.2, 11.0}) {
    const int out = 20;
    const int begin = 13;
    const int end = begin + static_cast<int>(out * scale) + 1;
    taps.Plan(AxisMap{0.0, scale, 0, out, begin, end});
    EXPECT_GE(taps.precision_bits(), 14);
    EXPECT_GE(taps.source_begin(), begin);
    EXPECT_LE(taps.source_end(), end);
    for (int k = 0; k < out; ++k) {
      EXPECT_GE(taps.first()[k], 0);
      EXPECT_LE(taps.source_begin() + taps.first()[k] + taps.taps(), taps.source_end());
      const int16_t* w = taps.weights() + k * taps.taps();
      const int64_t sum = std::accumulate(w, w + taps.taps(), int64_t{0});
      EXPECT_NEAR(sum, 1 << taps.precision_bits(), taps.taps()) << scale << " " << k;
    }
  }
}

TEST(ResampleTest, ScaleAxisMapKeepsTheBoxInSourceTerms) {
  const AxisMap map{0.0, 400.0 / 224, 0, 224, 100, 500};
  EXPECT_EQ(ScaleAxisMap(map, 8, 8, 1000).clip_begin, 100);
  const AxisMap half = ScaleAxisMap(map, 1, 2, 500);
  EXPECT_EQ(half.clip_begin, 50);
  EXPECT_EQ(half.clip_end, 250);
  EXPECT_DOUBLE_EQ(half.in0, 0.0);
  EXPECT_DOUBLE_EQ(half.scale, 200.0 / 224);
  const AxisMap odd = ScaleAxisMap(AxisMap{0.0, 1.0, 0, 10, 101, 111}, 3, 8, 375);
  EXPECT_EQ(odd.clip_begin, 37);  // floor(101 * 3 / 8)
  EXPECT_EQ(odd.clip_end, 42);    // ceil(111 * 3 / 8)
  EXPECT_DOUBLE_EQ(odd.in0, 101 * 3.0 / 8 - 37);
}

}  // namespace
}  // namespace stoker::data_service::image
