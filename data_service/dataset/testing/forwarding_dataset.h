// ForwardingDataset: the base of tests' Dataset decorators (one that fails, hangs or slows
// down some Load, or misreports a property), which override the one member they change
// and forward the rest. Only tests link this.
#ifndef STOKER_DATA_SERVICE_DATASET_TESTING_FORWARDING_DATASET_H_
#define STOKER_DATA_SERVICE_DATASET_TESTING_FORWARDING_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data_service/dataset/dataset.h"

namespace stoker::data_service::test_util {

// A Dataset that forwards every member to `base`, which it shares. Thread-safe as `base`
// is; a subclass that overrides a member keeps it so.
//
//   class SlowDataset : public test_util::ForwardingDataset {
//    public:
//     using ForwardingDataset::ForwardingDataset;
//     absl::Status Load(...) const override { absl::SleepFor(delay); return base().Load(...); }
//   };
class ForwardingDataset : public Dataset {
 public:
  explicit ForwardingDataset(std::shared_ptr<const Dataset> base) : base_(std::move(base)) {}

  int64_t size() const override { return base_->size(); }
  int32_t num_classes() const override { return base_->num_classes(); }
  int32_t Label(int64_t index) const override { return base_->Label(index); }
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const override {
    return base_->Load(index, options, scratch, dst);
  }
  absl::StatusOr<absl::Span<const uint8_t>> ReadEncoded(int64_t index,
                                                        SampleScratch& scratch) const override {
    return base_->ReadEncoded(index, scratch);
  }
  std::string Describe(int64_t index) const override { return base_->Describe(index); }

 protected:
  const Dataset& base() const { return *base_; }

 private:
  std::shared_ptr<const Dataset> base_;
};

}  // namespace stoker::data_service::test_util

#endif  // STOKER_DATA_SERVICE_DATASET_TESTING_FORWARDING_DATASET_H_
