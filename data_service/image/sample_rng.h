// SampleRng: the deterministic random source of Stoker's augmentation. Every random choice
// made for one sample (crop box, flip) is a pure function of (seed, epoch, sample index),
// so batches are bit-identical whatever the thread count, scheduling or restart point.
#ifndef STOKER_DATA_SERVICE_IMAGE_SAMPLE_RNG_H_
#define STOKER_DATA_SERVICE_IMAGE_SAMPLE_RNG_H_

#include <cstdint>

namespace stoker::data_service::image {

// Names one sample's draw: the epoch's sampler seed, the epoch, and the sample's index in
// the dataset (not its position in the batch).
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;
};

// A counter-based generator: the key (seed, epoch, index) is hashed into a 64-bit stream
// key, and draw n is splitmix64's output function applied to key + n * golden-ratio
// increment. Cheap to construct (no state tables), so one is made per sample. It is not
// torch's generator: the values differ from torch's, the distributions built on it do not.
// Not thread-safe; it is a value owned by the thread handling the sample.
//
//   SampleRng rng(SampleKey{seed, epoch, index});
//   double u = rng.NextDouble();            // [0, 1)
//   int64_t i = rng.UniformInt(0, n - 1);   // like torch.randint(0, n)
class SampleRng {
 public:
  explicit SampleRng(const SampleKey& key);

  // 64 uniformly distributed bits.
  uint64_t NextU64();

  // Uniform in [0, 1) with 53 random bits.
  double NextDouble();

  // Uniform in [lo, hi) (torch's Tensor.uniform_(lo, hi)).
  double Uniform(double lo, double hi);

  // Uniform integer in [lo, hi], both inclusive, without modulo bias. Requires lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi);

 private:
  uint64_t stream_key_;
  uint64_t counter_ = 0;
};

}  // namespace stoker::data_service::image

#endif  // STOKER_DATA_SERVICE_IMAGE_SAMPLE_RNG_H_
