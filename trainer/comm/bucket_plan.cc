#include "trainer/comm/bucket_plan.h"

namespace stoker::trainer {

std::vector<Bucket> PlanBuckets(const std::vector<int64_t>& parameter_numels, size_t element_bytes,
                                size_t bucket_bytes) {
  const int64_t budget = static_cast<int64_t>(bucket_bytes / (element_bytes ? element_bytes : 1));
  std::vector<Bucket> buckets;
  Bucket current;
  for (int i = static_cast<int>(parameter_numels.size()) - 1; i >= 0; --i) {
    const int64_t numel = parameter_numels[i];
    if (!current.slots.empty() && current.numel + numel > budget) {
      buckets.push_back(std::move(current));
      current = Bucket();
    }
    current.slots.push_back(BucketSlot{i, current.numel, numel});
    current.numel += numel;
  }
  if (!current.slots.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace stoker::trainer
