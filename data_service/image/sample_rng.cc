// SampleRng: splitmix64's output function over a hashed (seed, epoch, index) key.
#include "data_service/image/sample_rng.h"

#include <cstdint>

#include "common/seed_mix.h"

namespace stoker::data_service::image {

SampleRng::SampleRng(const SampleKey& key) {
  // Each component goes through the mixer before the next is folded in, so (seed, epoch,
  // index) tuples that differ in any one field give unrelated stream keys.
  uint64_t h = SplitMix64Finalize(key.seed + kSplitMix64Gamma);
  h = SplitMix64Finalize(h ^ (static_cast<uint64_t>(key.epoch) + 2 * kSplitMix64Gamma));
  h = SplitMix64Finalize(h ^ (static_cast<uint64_t>(key.index) + 3 * kSplitMix64Gamma));
  stream_key_ = h;
}

uint64_t SampleRng::NextU64() {
  ++counter_;
  return SplitMix64Finalize(stream_key_ + counter_ * kSplitMix64Gamma);
}

double SampleRng::NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double SampleRng::Uniform(double lo, double hi) { return lo + (hi - lo) * NextDouble(); }

int64_t SampleRng::UniformInt(int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (range == UINT64_MAX) return static_cast<int64_t>(NextU64());
  const uint64_t n = range + 1;
  // Rejection sampling: [0, bound) holds every residue mod n equally often.
  const uint64_t bound = (UINT64_MAX / n) * n;
  uint64_t x;
  do {
    x = NextU64();
  } while (x >= bound);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % n);
}

}  // namespace stoker::data_service::image
