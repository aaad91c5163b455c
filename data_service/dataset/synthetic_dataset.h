// SyntheticDataset: a deterministic, file-free image classification dataset that a small
// CNN can learn in a few dozen steps. Used by tests and benchmarks, and whenever the data
// path must be exercised without a dataset on disk.
#ifndef STOKER_DATA_SERVICE_DATASET_SYNTHETIC_DATASET_H_
#define STOKER_DATA_SERVICE_DATASET_SYNTHETIC_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data_service/dataset/dataset.h"

namespace stoker::data_service {

struct SyntheticOptions {
  int64_t samples = 0;
  int32_t classes = 0;
  uint64_t data_seed = 0;
  // The validation split draws different samples of the same classes.
  bool validation = false;
};

// Sample i has label i % classes. Its image is the class's pattern (a colour from a hue
// wheel, and stripes whose direction and spacing depend on the class) with per-sample
// variation (stripe phase, brightness, pixel noise) drawn from (data_seed, split, i). The
// image does not depend on the epoch or on the sampler seed: the same index always gives
// the same bytes. Immutable; thread-safe.
class SyntheticDataset : public Dataset {
 public:
  // InvalidArgument unless samples >= 1 and classes in 1..100000.
  static absl::StatusOr<std::unique_ptr<SyntheticDataset>> Create(const SyntheticOptions& options);

  int64_t size() const override { return options_.samples; }
  int32_t num_classes() const override { return options_.classes; }
  int32_t Label(int64_t index) const override;
  // `scratch` is not used: nothing is read or decoded.
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const override;
  std::string Describe(int64_t index) const override;

 private:
  explicit SyntheticDataset(const SyntheticOptions& options) : options_(options) {}
  SyntheticOptions options_;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_SYNTHETIC_DATASET_H_
