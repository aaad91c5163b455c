#include "data_service/dataset/synthetic_dataset.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/seed_mix.h"

namespace stoker::data_service {
namespace {

constexpr int32_t kMaxClasses = 100000;

// Uniform in [lo, hi] from SplitMix64 (integer-only, so that the bytes are the same on every
// machine and compiler).
int UniformInt(SplitMix64& rng, int lo, int hi) {
  return lo + static_cast<int>(rng.Next() % static_cast<uint64_t>(hi - lo + 1));
}

// The class colour: hue k/K on the wheel, saturation 0.8, value 0.85, as 0..255 integers.
void ClassColour(int32_t label, int32_t classes, int rgb[3]) {
  const int hue = static_cast<int>((int64_t{label} * 1536) / classes);  // 0..1535, six 256-sectors
  const int sector = hue / 256;
  const int f = hue % 256;
  const int v = 217, lo = 43;  // value 0.85, minimum v * (1 - 0.8)
  const int up = lo + (v - lo) * f / 255, down = v - (v - lo) * f / 255;
  const int table[6][3] = {{v, up, lo},   {down, v, lo}, {lo, v, up},
                           {lo, down, v}, {up, lo, v},   {v, lo, down}};
  for (int c = 0; c < 3; ++c) rgb[c] = table[sector][c];
}

}  // namespace

absl::StatusOr<std::unique_ptr<SyntheticDataset>> SyntheticDataset::Create(
    const SyntheticOptions& options) {
  if (options.samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic dataset: samples must be at least 1, got ", options.samples));
  }
  if (options.classes < 1 || options.classes > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic dataset: classes must be in 1..",
                                                   kMaxClasses, ", got ", options.classes));
  }
  return std::unique_ptr<SyntheticDataset>(new SyntheticDataset(options));
}

int32_t SyntheticDataset::Label(int64_t index) const {
  return static_cast<int32_t>(index % options_.classes);
}

std::string SyntheticDataset::Describe(int64_t index) const {
  return absl::StrCat("synthetic ", options_.validation ? "validation" : "training", " sample ",
                      index);
}

absl::Status SyntheticDataset::Load(int64_t index, const SampleOptions& options,
                                    SampleScratch& /*scratch*/, uint8_t* dst) const {
  if (index < 0 || index >= options_.samples) {
    return absl::OutOfRangeError(
        absl::StrCat(Describe(index), " is outside 0..", options_.samples - 1));
  }
  if (options.image_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_size must be positive, got ", options.image_size));
  }
  const int32_t label = Label(index);
  const int size = options.image_size;
  SplitMix64 rng(AugmentationSeed(options_.data_seed, options_.validation ? 1 : 0, index));

  int colour[3];
  ClassColour(label, options_.classes, colour);
  // Stripes: four directions, three spacings; the class picks one of twelve patterns
  // (and the colour separates classes that share a pattern).
  static constexpr int kDirections[4][2] = {{1, 0}, {0, 1}, {1, 1}, {1, -1}};
  const int direction = label % 4;
  const int periods = 2 + (label / 4) % 3;  // stripe periods across the image
  const int half_period = std::max(1, size / (2 * periods));
  const int phase = UniformInt(rng, 0, 2 * half_period - 1);
  const int brightness = UniformInt(rng, 85, 115);  // percent
  const int dx = kDirections[direction][0], dy = kDirections[direction][1];
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const int t = x * dx + y * dy + 2 * size + phase;  // non-negative
      const bool dark = (t / half_period) % 2 == 1;
      uint8_t* pixel = dst + (static_cast<size_t>(y) * size + x) * 3;
      const uint64_t noise = rng.Next();
      for (int c = 0; c < 3; ++c) {
        int value = colour[c] * brightness / 100;
        if (dark) value = value * 45 / 100;
        value += static_cast<int>((noise >> (16 * c)) % 41) - 20;  // +-20
        pixel[c] = static_cast<uint8_t>(std::clamp(value, 0, 255));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::data_service
