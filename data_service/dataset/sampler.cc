#include "data_service/dataset/sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stoker::data_service {

// Note [torch.randperm on the CPU]
// For n < 2^32 / 20, ATen's randperm_cpu fills 0..n-1 and runs a Fisher-Yates shuffle
// drawing 32-bit numbers from the CPU generator:
//   for (i = 0; i < n - 1; i++) { z = generator->random() % (n - i); swap(r[i], r[z + i]); }
// The CPU generator is a standard 32-bit Mersenne Twister whose state is initialised from
// the low 32 bits of the 64-bit manual seed (at::mt19937's init_with_uint32), so
// std::mt19937(seed & 0xffffffff) produces the same stream. (For larger n torch switches
// to a 64-bit inside-out shuffle; Stoker refuses such datasets rather than guess.)
// sampler_test checks the result against the installed torch.
std::vector<int64_t> TorchRandperm(int64_t n, uint64_t seed) {
  std::vector<int64_t> result(n > 0 ? n : 0);
  std::iota(result.begin(), result.end(), int64_t{0});
  std::mt19937 generator(static_cast<uint32_t>(seed & 0xffffffffu));
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(generator() % static_cast<uint64_t>(n - i));
    std::swap(result[i], result[z + i]);
  }
  return result;
}

absl::StatusOr<DistributedSampler> DistributedSampler::Create(const SamplerOptions& options) {
  if (options.dataset_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: the dataset is empty (size ", options.dataset_size, ")"));
  }
  if (options.dataset_size >= kMaxRandpermSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: datasets of ", kMaxRandpermSize,
        " samples or more are not supported (torch.randperm changes algorithm there)"));
  }
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: world_size must be at least 1, got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: rank ", options.rank, " is not in 0..", options.world_size - 1));
  }
  const int64_t n = options.dataset_size;
  const int64_t world = options.world_size;
  // torch: ceil((n - W) / W) with drop_last and a remainder, else ceil(n / W).
  const int64_t num_samples =
      (options.drop_last && n % world != 0) ? n / world : (n + world - 1) / world;
  return DistributedSampler(options, num_samples);
}

std::vector<int64_t> DistributedSampler::EpochIndices(uint64_t seed, int64_t epoch) const {
  return Positions(seed, epoch, 0, total_size());
}

absl::StatusOr<std::vector<int64_t>> DistributedSampler::RestOfEpochIndices(
    uint64_t seed, int64_t epoch, int64_t start_sample) const {
  const int64_t n = options_.dataset_size;
  if (start_sample < 0 || start_sample >= n) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: the epoch's position ", start_sample,
                                                   " is not in 0..", n - 1, " (dataset of ", n,
                                                   " samples)"));
  }
  // Note [The rest of an epoch]: DistributedSampler's padding or cut, applied to the rest.
  const int64_t rest = n - start_sample;
  const int64_t world = options_.world_size;
  const int64_t per_rank = options_.drop_last ? rest / world : (rest + world - 1) / world;
  return Positions(seed, epoch, start_sample, start_sample + per_rank * world);
}

std::vector<int64_t> DistributedSampler::Positions(uint64_t seed, int64_t epoch, int64_t begin,
                                                   int64_t end) const {
  const int64_t n = options_.dataset_size;
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = TorchRandperm(n, seed + static_cast<uint64_t>(epoch));
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  // Without drop_last, torch pads with the first indices, repeating the whole list as many
  // times as needed when padding exceeds n. With drop_last it keeps the first total.
  std::vector<int64_t> mine;
  mine.reserve((end - begin) / options_.world_size);
  for (int64_t i = begin + options_.rank; i < end; i += options_.world_size) {
    mine.push_back(order[i % n]);
  }
  return mine;
}

}  // namespace stoker::data_service
