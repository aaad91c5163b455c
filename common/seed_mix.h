// SplitMix64 (Steele, Lea and Flood), the one integer mixer Stoker derives its
// deterministic randomness from: the per-sample augmentation seed, the augmentation draws
// and the synthetic dataset's pixels. Integer-only, so the values are the same on every
// machine and compiler; tests pin them (sampling and augmentation determinism).
#ifndef STOKER_COMMON_SEED_MIX_H_
#define STOKER_COMMON_SEED_MIX_H_

#include <cstdint>

namespace stoker {

// SplitMix64's increment: 2^64 divided by the golden ratio, odd.
inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function (Stafford's "variant 13" finaliser): a bijection on 64 bits
// with full avalanche, so neighbouring inputs give unrelated outputs.
constexpr uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One SplitMix64 step from state `z`: the finaliser of z + gamma. Chaining it over the
// fields of a tuple, SplitMix64Mix(SplitMix64Mix(a) ^ b), hashes the tuple.
constexpr uint64_t SplitMix64Mix(uint64_t z) { return SplitMix64Finalize(z + kSplitMix64Gamma); }

// The SplitMix64 generator: draw n is SplitMix64Finalize(seed + n * gamma), n = 1, 2, ...
// A value; not thread-safe.
//
//   SplitMix64 rng(seed);
//   uint64_t bits = rng.Next();
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}

  // The next 64 bits.
  constexpr uint64_t Next() {
    state_ += kSplitMix64Gamma;
    return SplitMix64Finalize(state_);
  }

 private:
  uint64_t state_;
};

}  // namespace stoker

#endif  // STOKER_COMMON_SEED_MIX_H_
