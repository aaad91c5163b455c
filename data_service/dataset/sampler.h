// DistributedSampler: which dataset indices rank r of W sees in an epoch, exactly as
// torch.utils.data.DistributedSampler computes them (so a Stoker run and a PyTorch run
// with the same seed visit samples in the same order), plus TorchRandperm, a libtorch-free
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

  // Samples per rank per epoch: ceil(n / W), or floor(n / W) with drop_last.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * options_.world_size; }
  const SamplerOptions& options() const { return options_; }

 private:
  DistributedSampler(const SamplerOptions& options, int64_t num_samples)
      : options_(options), num_samples_(num_samples) {}

  SamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_SAMPLER_H_
