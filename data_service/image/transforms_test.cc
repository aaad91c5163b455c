#include "data_service/image/transforms.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/image/decode.h"
#include "data_service/image/test_support.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service::image {
namespace {

using ::stoker::data_service::image::testing::ImageCaseDir;
using ::stoker::data_service::image::testing::LoadFileOrFail;
using ::stoker::data_service::image::testing::MaxAbsDiff;
using ::stoker::data_service::image::testing::Psnr;
using ::stoker::data_service::image::testing::ReadTable;
using ::stoker::testing::StatusIs;

constexpr int kRrcDraws = 20000;

int ToInt(const std::string& s) {
  int v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(s, &v)) << s;
  return v;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---------------------------------------------------------------------------------------
// Geometry.

TEST(EvalGeometryTest, FollowsTorchvisionSizeAndRounding) {
  const TransformSpec spec = TransformSpec::Eval(256, 224);
  EvalGeometry g = ComputeEvalGeometry(500, 375, spec);
  EXPECT_EQ(g.resized_width, 341);  // int(256 * 500 / 375) = int(341.33)
  EXPECT_EQ(g.resized_height, 256);
  EXPECT_EQ(g.crop_left, 58);  // round(58.5) = 58: Python rounds half to even
  EXPECT_EQ(g.crop_top, 16);
  g = ComputeEvalGeometry(375, 500, spec);
  EXPECT_EQ(g.resized_width, 256);
  EXPECT_EQ(g.resized_height, 341);
  EXPECT_EQ(g.crop_top, 58);
  g = ComputeEvalGeometry(333, 1000, spec);  // 256 * 1000 / 333 = 768.77
  EXPECT_EQ(g.resized_height, 768);
  EXPECT_EQ(g.crop_top, 272);
  g = ComputeEvalGeometry(227, 100, spec);  // 581.12 wide; (581 - 224) / 2 = 178.5
  EXPECT_EQ(g.resized_width, 581);
  EXPECT_EQ(g.crop_left, 178);
}

TEST(TransformSpecTest, RejectsUnusableSpecs) {
  EXPECT_OK(TransformSpec::Eval(256, 224).Validate());
  EXPECT_OK(TransformSpec::Train(224).Validate());
  EXPECT_THAT(TransformSpec::Eval(200, 224).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TransformSpec::Train(0).Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  TransformSpec spec = TransformSpec::Train(224);
  spec.min_scale = 0.5;
  spec.max_scale = 0.4;
  EXPECT_THAT(spec.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = TransformSpec::Train(224);
  spec.min_ratio = 0.0;
  EXPECT_THAT(spec.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = TransformSpec::Train(224);
  spec.flip_probability = 1.5;
  EXPECT_THAT(spec.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SampleTrainParamsTest, FallbackIsTheCentreCropWithTheRatioClamped) {
  // A 1 x 100 strip: no try can succeed (w = round(sqrt(a * r)) > 1 for every draw).
  const TransformSpec spec = TransformSpec::Train(224);
  SampleRng rng(SampleKey{1, 2, 3});
  const TrainParams p = SampleTrainParams(1, 100, spec, rng);
  EXPECT_TRUE(p.fallback);
  EXPECT_EQ(p.crop.width, 1);
  EXPECT_EQ(p.crop.height, 1);  // round(1 / (3 / 4)) = round(1.33)
  EXPECT_EQ(p.crop.top, 49);
  EXPECT_EQ(p.crop.left, 0);
}

// ---------------------------------------------------------------------------------------
// Equivalence with torchvision.

// Stoker resamples with Pillow's coefficients and fixed-point arithmetic but always
// horizontal pass first (Note [Pillow pass order] in resample.h), so PNGs, decoded exactly
// as Pillow does, must come out within one level of torchvision's output; any geometry
// error would show as far more than that.
bool CloseToPillow(const std::vector<uint8_t>& out, const std::vector<uint8_t>& expected) {
  return MaxAbsDiff(out.data(), expected.data(), out.size()) <= 1 &&
         Psnr(out.data(), expected.data(), out.size()) >= 50.0;
}

// Resize(256) + CenterCrop(224) against torchvision v2 on Pillow-decoded images: PNGs
// within one level (Note [Pillow pass order]); JPEGs, decoded with DCT-domain downscaling
// that Pillow does not do, at >= 30 dB PSNR.
TEST(DecodeAndTransformTest, EvalMatchesTorchvisionResizeCenterCrop) {
  const std::string& dir = ImageCaseDir("eval");
  auto table = ReadTable(dir + "/manifest.txt");
  ASSERT_OK(table);
  ASSERT_GE(table->size(), 20u);
  const TransformSpec spec = TransformSpec::Eval(256, 224);
  TransformScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  for (const auto& row : *table) {
    const std::string& name = row[0];
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = LoadFileOrFail(dir + "/" + name);
    const std::vector<uint8_t> expected = LoadFileOrFail(dir + "/" + name + ".rgb");
    ASSERT_EQ(expected.size(), out.size());
    // Every JPEG scale choice must hold the bar, the default's and all of them.
    if (!EndsWith(name, ".png")) {
      TransformSpec all_scales = spec;
      all_scales.decode.dct_scaling = DctScaling::kAll;
      TransformTrace trace;
      ASSERT_OK(DecodeAndTransform(bytes, all_scales, SampleKey{}, scratch, out.data(), &trace));
      const double psnr = Psnr(out.data(), expected.data(), out.size());
      std::printf("%-22s eval  scale %d/%d  (DctScaling::kAll)      PSNR %6.2f dB\n", name.c_str(),
                  trace.scale.num, trace.scale.denom, psnr);
      EXPECT_GE(psnr, 30.0) << "DctScaling::kAll";
      // Pillow's own reconstruction (Note [Fast JPEG reconstruction] in decode.h).
      TransformSpec pillow = spec;
      pillow.decode = DecodeOptions();
      ASSERT_OK(DecodeAndTransform(bytes, pillow, SampleKey{}, scratch, out.data()));
      const double pillow_psnr = Psnr(out.data(), expected.data(), out.size());
      std::printf("%-22s eval  Pillow's JPEG reconstruction           PSNR %6.2f dB\n",
                  name.c_str(), pillow_psnr);
      EXPECT_GE(pillow_psnr, 30.0) << "Pillow's reconstruction";
    }
    TransformTrace trace;
    const absl::Status status =
        DecodeAndTransform(bytes, spec, SampleKey{}, scratch, out.data(), &trace);
    ASSERT_OK(status);
    EXPECT_EQ(trace.header.width, ToInt(row[1]));
    EXPECT_EQ(trace.header.height, ToInt(row[2]));
    const double psnr = Psnr(out.data(), expected.data(), out.size());
    std::printf("%-22s eval  scale %d/%d  decoded %4dx%-4d  PSNR %6.2f dB  max diff %d\n",
                name.c_str(), trace.scale.num, trace.scale.denom, trace.decoded.width,
                trace.decoded.height, psnr, MaxAbsDiff(out.data(), expected.data(), out.size()));
    if (EndsWith(name, ".png")) {
      EXPECT_TRUE(CloseToPillow(out, expected)) << "PSNR " << psnr;
    } else {
      EXPECT_GE(psnr, 30.0);
    }
    // The DCT scale is the smallest power of two (the default DctScaling) that keeps the
    // resized image's resolution: 1/1 when even the full image is smaller, and for PNG.
    const EvalGeometry& g = trace.eval;
    auto covers = [&](int d) {
      return trace.header.width >= int64_t{g.resized_width} * d &&
             trace.header.height >= int64_t{g.resized_height} * d;
    };
    ASSERT_EQ(trace.scale.num, 1);
    const int d = trace.scale.denom;
    if (EndsWith(name, ".png")) {
      EXPECT_EQ(d, 1);
    } else {
      EXPECT_TRUE(covers(d) || d == 1) << "1/" << d;
      EXPECT_TRUE(d == 8 || !covers(2 * d)) << "1/" << d;
    }
  }
}

// RandomResizedCrop's resize of a given crop, and the flip, against torchvision's
// F.resized_crop + F.horizontal_flip: within one level on PNG, >= 30 dB on JPEG.
TEST(DecodeAndTransformTest, TrainMatchesTorchvisionResizedCropAndFlip) {
  const std::string& dir = ImageCaseDir("train");
  auto table = ReadTable(dir + "/manifest.txt");
  ASSERT_OK(table);
  ASSERT_GE(table->size(), 40u);
  const TransformSpec spec = TransformSpec::Train(224);
  TransformScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  double worst_jpeg = 1e9;
  double worst_pillow_jpeg = 1e9;
  int png = 0;
  int exact_png = 0;
  for (const auto& row : *table) {
    const std::string& name = row[0];
    TrainParams params;
    params.crop = CropBox{ToInt(row[2]), ToInt(row[3]), ToInt(row[4]), ToInt(row[5])};
    params.flip = row[6] == "1";
    SCOPED_TRACE(absl::StrCat(name, " crop ", row[4], "x", row[5], " at (", row[3], ",", row[2],
                              ") flip ", row[6]));
    const std::vector<uint8_t> bytes = LoadFileOrFail(dir + "/" + name);
    const std::vector<uint8_t> expected = LoadFileOrFail(dir + "/" + row[1]);
    TransformTrace trace;
    const absl::Status status =
        DecodeAndTransformWithParams(bytes, spec, params, scratch, out.data(), &trace);
    ASSERT_OK(status);
    const double psnr = Psnr(out.data(), expected.data(), out.size());
    if (EndsWith(name, ".png")) {
      EXPECT_TRUE(CloseToPillow(out, expected)) << "PSNR " << psnr;
      exact_png += out == expected;
      ++png;
    } else {
      EXPECT_GE(psnr, 30.0) << "scale " << trace.scale.num << "/" << trace.scale.denom;
      worst_jpeg = std::min(worst_jpeg, psnr);
      TransformSpec pillow = spec;
      pillow.decode = DecodeOptions();
      ASSERT_OK(DecodeAndTransformWithParams(bytes, pillow, params, scratch, out.data()));
      const double pillow_psnr = Psnr(out.data(), expected.data(), out.size());
      EXPECT_GE(pillow_psnr, 30.0) << "Pillow's reconstruction";
      worst_pillow_jpeg = std::min(worst_pillow_jpeg, pillow_psnr);
    }
  }
  std::printf(
      "train: worst JPEG PSNR %.2f dB (Pillow's JPEG reconstruction %.2f dB); %d of "
      "%d PNG cases bit-identical\n",
      worst_jpeg, worst_pillow_jpeg, exact_png, png);
}

// ---------------------------------------------------------------------------------------
// The distribution of RandomResizedCrop's boxes.

struct BoxStats {
  std::vector<double> area;       // h * w / (H * W)
  std::vector<double> log_ratio;  // log(w / h)
  std::vector<double> center_x;   // (j + w / 2) / W
  std::vector<double> center_y;
  std::vector<double> centre_box;  // 1 when the box is the fallback's centre crop
};

void AddBox(const CropBox& box, int width, int height, const CropBox& centre, BoxStats* stats) {
  stats->area.push_back(static_cast<double>(box.height) * box.width /
                        (static_cast<double>(width) * height));
  stats->log_ratio.push_back(std::log(static_cast<double>(box.width) / box.height));
  stats->center_x.push_back((box.left + box.width / 2.0) / width);
  stats->center_y.push_back((box.top + box.height / 2.0) / height);
  stats->centre_box.push_back(box.top == centre.top && box.left == centre.left &&
                                      box.height == centre.height && box.width == centre.width
                                  ? 1.0
                                  : 0.0);
}

void MeanAndVariance(const std::vector<double>& v, double* mean, double* var) {
  double s = 0.0;
  for (double x : v) s += x;
  *mean = s / v.size();
  double q = 0.0;
  for (double x : v) q += (x - *mean) * (x - *mean);
  *var = q / (v.size() - 1);
}

// Two-sample Kolmogorov-Smirnov statistic.
double KsStatistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  size_t i = 0, j = 0;
  double d = 0.0;
  while (i < a.size() && j < b.size()) {
    const double x = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= x) ++i;
    while (j < b.size() && b[j] <= x) ++j;
    d = std::max(d, std::abs(double(i) / a.size() - double(j) / b.size()));
  }
  return d;
}

// For each image size, 20000 boxes drawn by torchvision's RandomResizedCrop.make_params
// (torch's generator) and 20000 drawn by SampleTrainParams (SampleRng over 20000 sample
// indices) must come from the same distribution. Each mean (area fraction, log aspect
// ratio, box centre, rate of the fallback's centre box) must agree within 5 standard
// errors of the difference, sqrt(var_a / n + var_b / n): a false alarm has probability
// ~6e-7 per comparison, and both sides are seeded, so the test is deterministic. The
// Kolmogorov-Smirnov distance of the area and log-ratio distributions must stay below
// the critical value for p = 1e-4, 2.23 * sqrt(2 / n) = 0.0223.
TEST(SampleTrainParamsTest, BoxDistributionMatchesTorchvision) {
  const std::string& dir = ImageCaseDir("rrc", {std::to_string(kRrcDraws)});
  auto table = ReadTable(dir + "/manifest.txt");
  ASSERT_OK(table);
  ASSERT_GE(table->size(), 5u);
  const TransformSpec spec = TransformSpec::Train(224);
  for (const auto& row : *table) {
    const int width = ToInt(row[1]);
    const int height = ToInt(row[2]);
    SCOPED_TRACE(absl::StrCat(width, "x", height));
    // The fallback's box for this size, computed by SampleTrainParams on an impossible
    // draw would need torch's internals; recompute it from the definition instead.
    const double in_ratio = static_cast<double>(width) / height;
    int cw = width, ch = height;
    if (in_ratio < spec.min_ratio) ch = static_cast<int>(std::nearbyint(cw / spec.min_ratio));
    if (in_ratio > spec.max_ratio) cw = static_cast<int>(std::nearbyint(ch * spec.max_ratio));
    const CropBox centre{(height - ch) / 2, (width - cw) / 2, ch, cw};

    BoxStats torch_stats, stoker_stats;
    auto boxes = ReadTable(dir + "/" + row[0]);
    ASSERT_OK(boxes);
    ASSERT_EQ(boxes->size(), static_cast<size_t>(kRrcDraws));
    for (const auto& b : *boxes) {
      AddBox(CropBox{ToInt(b[0]), ToInt(b[1]), ToInt(b[2]), ToInt(b[3])}, width, height, centre,
             &torch_stats);
    }
    int fallbacks = 0;
    for (int i = 0; i < kRrcDraws; ++i) {
      SampleRng rng(SampleKey{2024, 3, i});
      const TrainParams p = SampleTrainParams(width, height, spec, rng);
      ASSERT_GT(p.crop.width, 0);
      ASSERT_GT(p.crop.height, 0);
      ASSERT_LE(p.crop.left + p.crop.width, width);
      ASSERT_LE(p.crop.top + p.crop.height, height);
      fallbacks += p.fallback;
      AddBox(p.crop, width, height, centre, &stoker_stats);
    }
    const struct {
      const char* what;
      const std::vector<double>& a;
      const std::vector<double>& b;
    } comparisons[] = {
        {"area fraction", torch_stats.area, stoker_stats.area},
        {"log aspect ratio", torch_stats.log_ratio, stoker_stats.log_ratio},
        {"centre x", torch_stats.center_x, stoker_stats.center_x},
        {"centre y", torch_stats.center_y, stoker_stats.center_y},
        {"centre-box rate", torch_stats.centre_box, stoker_stats.centre_box},
    };
    for (const auto& c : comparisons) {
      double mean_a, var_a, mean_b, var_b;
      MeanAndVariance(c.a, &mean_a, &var_a);
      MeanAndVariance(c.b, &mean_b, &var_b);
      const double se = std::sqrt(var_a / c.a.size() + var_b / c.b.size());
      std::printf("%4dx%-4d %-17s torchvision %.5f  stoker %.5f  (%.2f SE)\n", width, height,
                  c.what, mean_a, mean_b, se > 0 ? (mean_b - mean_a) / se : 0.0);
      EXPECT_LE(std::abs(mean_a - mean_b), 5 * se + 1e-12) << c.what;
    }
    const double ks_area = KsStatistic(torch_stats.area, stoker_stats.area);
    const double ks_ratio = KsStatistic(torch_stats.log_ratio, stoker_stats.log_ratio);
    std::printf("%4dx%-4d KS area %.4f  KS log ratio %.4f  fallback rate %.4f\n", width, height,
                ks_area, ks_ratio, double(fallbacks) / kRrcDraws);
    EXPECT_LT(ks_area, 2.23 * std::sqrt(2.0 / kRrcDraws));
    EXPECT_LT(ks_ratio, 2.23 * std::sqrt(2.0 / kRrcDraws));
  }
}

// ---------------------------------------------------------------------------------------
// Determinism, errors, memory.

TEST(DecodeAndTransformTest, SameKeyGivesIdenticalOutputAndOtherKeysDiffer) {
  const std::string& dir = ImageCaseDir("eval");
  const std::vector<uint8_t> bytes = LoadFileOrFail(dir + "/eval_500x375.jpg");
  const TransformSpec spec = TransformSpec::Train(224);
  TransformScratch scratch_a, scratch_b;
  std::vector<uint8_t> a(224 * 224 * 3), b(224 * 224 * 3), other(224 * 224 * 3);
  for (int64_t index = 0; index < 20; ++index) {
    const SampleKey key{99, 4, index};
    ASSERT_OK(DecodeAndTransform(bytes, spec, key, scratch_a, a.data()));
    // A different scratch that has seen other images first.
    ASSERT_OK(DecodeAndTransform(bytes, spec, SampleKey{1, 1, index + 7}, scratch_b, other.data()));
    ASSERT_OK(DecodeAndTransform(bytes, spec, key, scratch_b, b.data()));
    EXPECT_EQ(a, b) << "index " << index;
  }
  std::vector<uint8_t> base(224 * 224 * 3);
  ASSERT_OK(DecodeAndTransform(bytes, spec, SampleKey{99, 4, 0}, scratch_a, base.data()));
  ASSERT_OK(DecodeAndTransform(bytes, spec, SampleKey{99, 4, 1}, scratch_a, other.data()));
  EXPECT_NE(base, other) << "different index";
  ASSERT_OK(DecodeAndTransform(bytes, spec, SampleKey{99, 5, 0}, scratch_a, other.data()));
  EXPECT_NE(base, other) << "different epoch";
  ASSERT_OK(DecodeAndTransform(bytes, spec, SampleKey{98, 4, 0}, scratch_a, other.data()));
  EXPECT_NE(base, other) << "different seed";
}

TEST(DecodeAndTransformTest, BadInputsAreInvalidArgument) {
  const std::string& bad = ImageCaseDir("bad");
  TransformScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  for (const TransformSpec& spec : {TransformSpec::Eval(256, 224), TransformSpec::Train(224)}) {
    for (const char* name : {"empty.jpg", "text.jpg", "truncated.jpg", "corrupt_scan.jpg",
                             "bomb.jpg", "bomb.png", "truncated.png"}) {
      SCOPED_TRACE(name);
      const absl::Status status = DecodeAndTransform(LoadFileOrFail(bad + "/" + name), spec,
                                                     SampleKey{1, 0, 0}, scratch, out.data());
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
    }
  }
  const std::vector<uint8_t> good = LoadFileOrFail(bad + "/good.jpg");  // 160 x 120
  TrainParams outside;
  outside.crop = CropBox{100, 100, 30, 61};
  EXPECT_EQ(
      DecodeAndTransformWithParams(good, TransformSpec::Train(224), outside, scratch, out.data())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DecodeAndTransform(good, TransformSpec::Eval(100, 224), SampleKey{}, scratch, out.data())
          .code(),
      absl::StatusCode::kInvalidArgument);
  // The scratch still works after all that.
  EXPECT_OK(DecodeAndTransform(good, TransformSpec::Train(224), SampleKey{}, scratch, out.data()));
}

// A constant-colour JPEG of the given size, through TurboJPEG.
std::vector<uint8_t> SolidJpeg(int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = 200;
    rgb[i + 1] = 100;
    rgb[i + 2] = 50;
  }
  tjhandle compressor = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(compressor, rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size,
                        TJSAMP_444, 100, 0),
            0);
  tjDestroy(compressor);
  std::vector<uint8_t> bytes(jpeg, jpeg + size);
  tjFree(jpeg);
  return bytes;
}

TEST(DecodeAndTransformTest, TinyAndExtremeImagesGiveTheirColour) {
  TransformScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  for (const auto& [w, h] :
       std::vector<std::pair<int, int>>{{1, 1}, {1, 300}, {300, 1}, {3, 2}, {2000, 7}, {5, 900}}) {
    SCOPED_TRACE(absl::StrCat(w, "x", h));
    const std::vector<uint8_t> bytes = SolidJpeg(w, h);
    auto decoded = DecodeImage(bytes);
    ASSERT_OK(decoded);
    for (const TransformSpec& spec : {TransformSpec::Eval(256, 224), TransformSpec::Train(224)}) {
      for (int64_t index = 0; index < 5; ++index) {
        std::fill(out.begin(), out.end(), 0);
        ASSERT_OK(DecodeAndTransform(bytes, spec, SampleKey{3, 1, index}, scratch, out.data()));
        // A constant image stays constant, whatever the geometry.
        for (size_t i = 0; i < out.size(); i += 3) {
          ASSERT_EQ(out[i], decoded->rgb[0]) << i;
          ASSERT_EQ(out[i + 1], decoded->rgb[1]) << i;
          ASSERT_EQ(out[i + 2], decoded->rgb[2]) << i;
        }
      }
    }
  }
}

TEST(TransformScratchTest, StopsGrowingOnceWarm) {
  const std::string& dir = ImageCaseDir("eval");
  auto table = ReadTable(dir + "/manifest.txt");
  ASSERT_OK(table);
  std::vector<std::vector<uint8_t>> files;
  for (const auto& row : *table) files.push_back(LoadFileOrFail(dir + "/" + row[0]));
  TransformScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  size_t warm = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < files.size(); ++i) {
      for (const TransformSpec& spec : {TransformSpec::Eval(256, 224), TransformSpec::Train(224)}) {
        ASSERT_OK(
            DecodeAndTransform(files[i], spec, SampleKey{3, 0, int64_t(i)}, scratch, out.data()));
      }
    }
    if (round == 0) warm = scratch.capacity_bytes();
  }
  EXPECT_GT(warm, 0u);
  EXPECT_EQ(scratch.capacity_bytes(), warm);
  std::printf("scratch after %zu images: %zu bytes\n", files.size(), warm);
}

TEST(TransformScratchTest, ReleaseBuffersGivesBackAnOutliersMemoryAndKeepsResults) {
  // A wide PNG (no DCT-domain downscale) cropped whole: the resampler keeps the vertically
  // resampled crop, 8000 x 224 x 3 bytes.
  constexpr int kWidth = 8000;
  constexpr int kHeight = 1200;
  ASSERT_OK_AND_ASSIGN(const ::stoker::testing::TempDir dir,
                       ::stoker::testing::TempDir::Create("release_buffers"));
  const std::string path = dir.Join("wide.png");
  std::vector<uint8_t> rgb(static_cast<size_t>(kWidth) * kHeight * 3);
  for (size_t i = 0; i < rgb.size(); ++i) {
    rgb[i] = static_cast<uint8_t>((i / 3 % kWidth) * 7 + i % 3);
  }
  ASSERT_OK(test_util::WritePng(path, kWidth, kHeight, rgb));
  const std::vector<uint8_t> bytes = LoadFileOrFail(path);
  TrainParams params;
  params.crop = CropBox{0, 0, kHeight, kWidth};
  TransformScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  ASSERT_OK(
      DecodeAndTransformWithParams(bytes, TransformSpec::Train(224), params, scratch, out.data()));
  EXPECT_GT(scratch.capacity_bytes(), size_t{kWidth} * 224 * 3);
  scratch.ReleaseBuffers();
  EXPECT_EQ(scratch.capacity_bytes(), 0u);
  std::vector<uint8_t> again(out.size());
  ASSERT_OK(DecodeAndTransformWithParams(bytes, TransformSpec::Train(224), params, scratch,
                                         again.data()));
  EXPECT_EQ(out, again);
}

}  // namespace
}  // namespace stoker::data_service::image
