// SampleRng: splitmix64's output function over a hashed (seed, epoch, index) key.
#include "data_service/image/sample_rng.h"

#include <cstdint>

namespace stoker::data_service::image {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// splitmix64's finaliser (Stafford's variant 13): a bijection on 64 bits with full
// avalanche, so neighbouring counters and keys give unrelated outputs.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

SampleRng::SampleRng(const SampleKey& key) {
  // Each component goes through the mixer before the next is folded in, so (seed, epoch,
  // index) tuples that differ in any one field give unrelated stream keys.
  uint64_t h = Mix64(key.seed + kGolden);
  h = Mix64(h ^ (static_cast<uint64_t>(key.epoch) + 2 * kGolden));
  h = Mix64(h ^ (static_cast<uint64_t>(key.index) + 3 * kGolden));
  stream_key_ = h;
}

uint64_t SampleRng::NextU64() {
  ++counter_;
  return Mix64(stream_key_ + counter_ * kGolden);
}

double SampleRng::NextDouble() {
  return static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
}

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
