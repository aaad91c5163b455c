// DistributedSampler: which dataset indices rank r of W sees in an epoch, exactly as
// torch.utils.data.DistributedSampler computes them (so a Stoker run and a PyTorch run
// with the same seed visit samples in the same order), and in the rest of an epoch that
// another run started (Note [The rest of an epoch]), plus TorchRandperm, a libtorch-free
// reproduction of torch.randperm on the CPU generator.
#ifndef STOKER_DATA_SERVICE_DATASET_SAMPLER_H_
#define STOKER_DATA_SERVICE_DATASET_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::data_service {

// torch.randperm stays bit-compatible with the algorithm below only under this size.
inline constexpr int64_t kMaxRandpermSize = int64_t{0xffffffff} / 20;

// The permutation that `g = torch.Generator(); g.manual_seed(seed);
// torch.randperm(n, generator=g)` returns. n must be in 0..kMaxRandpermSize-1.
std::vector<int64_t> TorchRandperm(int64_t n, uint64_t seed);

// Note [The rest of an epoch]
// An epoch's global order is the permutation of (seed + epoch), or 0..n-1 without
// shuffle. Rank r of W takes positions r, r + W, r + 2W, ... of it, so after every rank has
// trained k samples the run has consumed exactly the first k * W positions: the position in
// an epoch is one number, the samples of the global order consumed. A run that resumes at
// position p, with any world size W' and batch size, treats the rest of the order,
// positions p..n-1, as DistributedSampler treats a whole epoch: padded by wrap-around to a
// multiple of W' (with the epoch's first indices, as torch pads with the list's first) or,
// with drop_last, cut to one; rank r' takes positions p + r', p + r' + W', ... So every
// sample not yet trained comes once, in the global order, and after k more samples per
// rank the position is p + k * W' again. At p == 0 this is EpochIndices() exactly, and
// when W' divides p it is the tail of EpochIndices() at W'.

struct SamplerOptions {
  int64_t dataset_size = 0;
  int32_t world_size = 1;
  int32_t rank = 0;
  bool shuffle = true;
  bool drop_last = false;
};

// torch.utils.data.DistributedSampler for one rank. Immutable; thread-safe.
//
//   ASSIGN_OR_RETURN(DistributedSampler s, DistributedSampler::Create({n, world, rank}));
//   std::vector<int64_t> mine = s.EpochIndices(seed, epoch);  // s.num_samples() long
class DistributedSampler {
 public:
  // InvalidArgument for an empty dataset, world_size < 1, a rank outside 0..world-1, or a
  // dataset too large to reproduce torch.randperm.
  static absl::StatusOr<DistributedSampler> Create(const SamplerOptions& options);

  // This rank's indices for `epoch`: with shuffle, the permutation of seed + epoch
  // (torch's `g.manual_seed(self.seed + self.epoch)`), else 0..n-1; padded by
  // wrap-around to total_size() or cut to it with drop_last; then every world_size-th
  // element from position rank.
  std::vector<int64_t> EpochIndices(uint64_t seed, int64_t epoch) const;

  // This rank's indices for the rest of `epoch` after `start_sample` positions of its
  // global order were consumed (Note [The rest of an epoch]). InvalidArgument unless
  // start_sample is in 0..dataset_size-1.
  absl::StatusOr<std::vector<int64_t>> RestOfEpochIndices(uint64_t seed, int64_t epoch,
                                                          int64_t start_sample) const;

  // Samples per rank per epoch: ceil(n / W), or floor(n / W) with drop_last.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * options_.world_size; }
  const SamplerOptions& options() const { return options_; }

 private:
  DistributedSampler(const SamplerOptions& options, int64_t num_samples)
      : options_(options), num_samples_(num_samples) {}

  // The rank's share of positions begin..end-1 of the epoch's order (padded by wrap-around);
  // the world size divides end - begin.
  std::vector<int64_t> Positions(uint64_t seed, int64_t epoch, int64_t begin, int64_t end) const;

  SamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_SAMPLER_H_
