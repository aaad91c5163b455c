// RandomResizedCrop / Resize + CenterCrop geometry and the fused decode-crop-resize.
#include "data_service/image/transforms.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace stoker::data_service::image {
namespace {

// Python's round() on a float: half to even (the default floating-point rounding mode).
int PyRound(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

TransformSpec TransformSpec::Train(int size) {
  TransformSpec spec;
  spec.mode = TransformMode::kTrain;
  spec.output_size = size;
  return spec;
}

TransformSpec TransformSpec::Eval(int resize_size, int crop_size) {
  TransformSpec spec;
  spec.mode = TransformMode::kEval;
  spec.resize_size = resize_size;
  spec.output_size = crop_size;
  return spec;
}

absl::Status TransformSpec::Validate() const {
  constexpr int kMaxSize = 1 << 14;
  if (output_size <= 0 || output_size > kMaxSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_size must be in [1, ", kMaxSize, "], got ", output_size));
  }
  if (mode == TransformMode::kEval) {
    if (resize_size < output_size || resize_size > kMaxSize) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resize_size must be in [output_size, ", kMaxSize, "] (CenterCrop larger than the ",
          "resized image would pad), got resize_size ", resize_size, " and output_size ",
          output_size));
    }
    return absl::OkStatus();
  }
  if (!(min_scale > 0.0 && min_scale <= max_scale && max_scale <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale range must satisfy 0 < min <= max <= 1, got (", min_scale, ", ", max_scale, ")"));
  }
  if (!(min_ratio > 0.0 && min_ratio <= max_ratio && std::isfinite(max_ratio))) {
    return absl::InvalidArgumentError(absl::StrCat("ratio range must satisfy 0 < min <= max, got (",
                                                   min_ratio, ", ", max_ratio, ")"));
  }
  if (!(flip_probability >= 0.0 && flip_probability <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flip_probability must be in [0, 1], got ", flip_probability));
  }
  return absl::OkStatus();
}

TrainParams SampleTrainParams(int width, int height, const TransformSpec& spec, SampleRng& rng) {
  TrainParams params;
  params.flip = rng.NextDouble() < spec.flip_probability;
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(spec.min_ratio);
  const double log_hi = std::log(spec.max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(spec.min_scale, spec.max_scale);
    const double aspect_ratio = std::exp(rng.Uniform(log_lo, log_hi));
    const double w = std::nearbyint(std::sqrt(target_area * aspect_ratio));
    const double h = std::nearbyint(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      params.crop.width = static_cast<int>(w);
      params.crop.height = static_cast<int>(h);
      params.crop.top = static_cast<int>(rng.UniformInt(0, height - params.crop.height));
      params.crop.left = static_cast<int>(rng.UniformInt(0, width - params.crop.width));
      return params;
    }
  }
  // Fallback to the central crop, the ratio clamped into range.
  params.fallback = true;
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int w = width;
  int h = height;
  if (in_ratio < spec.min_ratio) {
    h = PyRound(w / spec.min_ratio);
  } else if (in_ratio > spec.max_ratio) {
    w = PyRound(h * spec.max_ratio);
  }
  params.crop = CropBox{(height - h) / 2, (width - w) / 2, h, w};
  return params;
}

EvalGeometry ComputeEvalGeometry(int width, int height, const TransformSpec& spec) {
  const int64_t short_side = std::min(width, height);
  const int64_t long_side = std::max(width, height);
  const int new_short = spec.resize_size;
  // Python: int(requested_new_short * long / short), a true division then truncation.
  const int new_long = static_cast<int>(static_cast<double>(new_short * long_side) /
                                        static_cast<double>(short_side));
  EvalGeometry g;
  g.resized_width = width <= height ? new_short : new_long;
  g.resized_height = width <= height ? new_long : new_short;
  g.crop_top = PyRound((g.resized_height - spec.output_size) / 2.0);
  g.crop_left = PyRound((g.resized_width - spec.output_size) / 2.0);
  return g;
}

size_t TransformScratch::capacity_bytes() const {
  return decoder_.capacity_bytes() + horizontal_.capacity_bytes() + vertical_.capacity_bytes() +
         resampler_.capacity_bytes();
}

void TransformScratch::ReleaseBuffers() {
  decoder_.ReleaseBuffers();
  horizontal_ = AxisTaps();
  vertical_ = AxisTaps();
  resampler_ = RgbResampler();
}

absl::StatusOr<SampleGeometry> PlanSampleGeometry(int width, int height, const TransformSpec& spec,
                                                  const SampleKey* key, const TrainParams* fixed) {
  const int size = spec.output_size;
  SampleGeometry g;
  if (spec.mode == TransformMode::kEval) {
    g.eval = ComputeEvalGeometry(width, height, spec);
    g.x = AxisMap{
        0.0, static_cast<double>(width) / g.eval.resized_width, g.eval.crop_left, size, 0, width};
    g.y = AxisMap{
        0.0, static_cast<double>(height) / g.eval.resized_height, g.eval.crop_top, size, 0, height};
    return g;
  }
  if (fixed != nullptr) {
    g.train = *fixed;
    const CropBox& c = g.train.crop;
    if (c.width <= 0 || c.height <= 0 || c.left < 0 || c.top < 0 || c.left + c.width > width ||
        c.top + c.height > height) {
      return absl::InvalidArgumentError(absl::StrCat("crop ", c.width, "x", c.height, " at (",
                                                     c.left, ",", c.top, ") is outside the ", width,
                                                     "x", height, " image"));
    }
  } else {
    if (key == nullptr) return absl::InvalidArgumentError("training geometry needs a key");
    SampleRng rng(*key);
    g.train = SampleTrainParams(width, height, spec, rng);
  }
  const CropBox& c = g.train.crop;
  g.x = AxisMap{0.0, static_cast<double>(c.width) / size, 0, size, c.left, c.left + c.width};
  g.y = AxisMap{0.0, static_cast<double>(c.height) / size, 0, size, c.top, c.top + c.height};
  g.flip = g.train.flip;
  return g;
}

namespace internal {

class TransformPipeline {
 public:
  // Exactly one of `key` and `fixed` is set for training; neither matters for evaluation.
  static absl::Status Run(absl::Span<const uint8_t> bytes, const TransformSpec& spec,
                          const SampleKey* key, const TrainParams* fixed, TransformScratch& scratch,
                          uint8_t* dst, TransformTrace* trace) {
    RETURN_IF_ERROR(spec.Validate());
    if (dst == nullptr) return absl::InvalidArgumentError("null destination buffer");
    ImageDecoder& decoder = scratch.decoder_;
    ASSIGN_OR_RETURN(const ImageHeader header, decoder.ReadHeader(bytes, spec.decode));
    const int width = header.width;
    const int height = header.height;
    const int size = spec.output_size;

    ASSIGN_OR_RETURN(const SampleGeometry geometry,
                     PlanSampleGeometry(width, height, spec, key, fixed));
    const AxisMap& x_map = geometry.x;
    const AxisMap& y_map = geometry.y;
    const bool flip = geometry.flip;
    TransformTrace local_trace;
    local_trace.train = geometry.train;
    local_trace.eval = geometry.eval;
    // The smallest DCT scale that keeps the resampled region's resolution (ChooseScale).
    const ScaleFactor scale =
        spec.mode == TransformMode::kEval
            ? ChooseScale(decoder.scale_factors(), width, geometry.eval.resized_width, height,
                          geometry.eval.resized_height)
            : ChooseScale(decoder.scale_factors(), geometry.train.crop.width, size,
                          geometry.train.crop.height, size);

    // Map both axes into the DCT-scaled image and plan the taps; their source ranges are
    // the region to decode.
    AxisTaps& h = scratch.horizontal_;
    AxisTaps& v = scratch.vertical_;
    h.Plan(ScaleAxisMap(x_map, scale.num, scale.denom, scale.Apply(width)));
    v.Plan(ScaleAxisMap(y_map, scale.num, scale.denom, scale.Apply(height)));
    const PixelRect region{h.source_begin(), v.source_begin(), h.source_end() - h.source_begin(),
                           v.source_end() - v.source_begin()};
    // Decoded rows stream through the resampler, which writes the sample into dst.
    RgbResampler& resampler = scratch.resampler_;
    resampler.Start(h, v, flip);
    // The decoder keeps each row for as long as the resampler reads it: no copies.
    if (trace != nullptr && trace->time_resize) {
      int64_t resize_ns = 0;
      RETURN_IF_ERROR(decoder.Decode(
          scale, region,
          [&](int, const uint8_t* rgb) {
            const auto start = std::chrono::steady_clock::now();
            resampler.AddRow(rgb);
            resize_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
          },
          resampler.rows_kept()));
      const auto start = std::chrono::steady_clock::now();
      resampler.Finish(dst, static_cast<ptrdiff_t>(size) * 3);
      resize_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
      local_trace.time_resize = true;
      local_trace.resize_ns = resize_ns;
    } else {
      RETURN_IF_ERROR(decoder.Decode(
          scale, region, [&](int, const uint8_t* rgb) { resampler.AddRow(rgb); },
          resampler.rows_kept()));
      resampler.Finish(dst, static_cast<ptrdiff_t>(size) * 3);
    }

    if (trace != nullptr) {
      local_trace.header = header;
      local_trace.scale = scale;
      local_trace.decoded = region;
      *trace = local_trace;
    }
    return absl::OkStatus();
  }
};

}  // namespace internal

absl::Status DecodeAndTransform(absl::Span<const uint8_t> bytes, const TransformSpec& spec,
                                const SampleKey& key, TransformScratch& scratch, uint8_t* dst,
                                TransformTrace* trace) {
  return internal::TransformPipeline::Run(bytes, spec, &key, nullptr, scratch, dst, trace);
}

absl::Status DecodeAndTransformWithParams(absl::Span<const uint8_t> bytes,
                                          const TransformSpec& spec, const TrainParams& params,
                                          TransformScratch& scratch, uint8_t* dst,
                                          TransformTrace* trace) {
  if (spec.mode != TransformMode::kTrain) {
    return absl::InvalidArgumentError("DecodeAndTransformWithParams needs a training spec");
  }
  return internal::TransformPipeline::Run(bytes, spec, nullptr, &params, scratch, dst, trace);
}

}  // namespace stoker::data_service::image
