// The Dataset interface: what the service needs from a dataset, "sample i -> (label, RGB
// image of S x S written into a destination)". Implementations: SyntheticDataset (no
// files) and ImageFolderDataset (torchvision's folder layout).
#ifndef STOKER_DATA_SERVICE_DATASET_H_
#define STOKER_DATA_SERVICE_DATASET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace stoker::data_service {

// How one sample is to be produced. Augmentation randomness must be a pure function of
// (seed, epoch, sample index): see AugmentationSeed().
struct SampleOptions {
  int32_t image_size = 0;  // output is image_size x image_size x 3
  bool train = true;       // training augmentation, or the deterministic evaluation path
  uint64_t seed = 0;       // the epoch's sampler seed
  int64_t epoch = 0;
};

// A read-only indexed dataset of labelled RGB images. Implementations are immutable after
// creation and thread-safe: the service's workers call Load() concurrently.
class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples; at least 1.
  virtual int64_t size() const = 0;
  virtual int32_t num_classes() const = 0;
  // The class of sample `index` (0 <= index < size()), in 0..num_classes()-1.
  virtual int32_t Label(int64_t index) const = 0;
  // Writes sample `index` as image_size x image_size RGB uint8, row-major HWC, to `dst`
  // (image_size * image_size * 3 bytes). The bytes depend only on (index, options).
  // The error message names the sample (and its file, if any).
  virtual absl::Status Load(int64_t index, const SampleOptions& options, uint8_t* dst) const = 0;
  // A short description of sample `index` for error messages ("sample 12 (train/cat/1.jpg)").
  virtual std::string Describe(int64_t index) const = 0;
};

// The seed of sample `index`'s augmentation randomness in an epoch: a SplitMix64 mix of
// (seed, epoch, index), independent of which thread produces the sample or when.
inline uint64_t AugmentationSeed(uint64_t seed, int64_t epoch, int64_t index) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
}

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_H_
