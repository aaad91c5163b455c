// BucketPlan: decides which gradients are reduced together. Parameters are taken in
// reverse order of registration (the order in which backward produces their gradients)
// and packed into flat buckets of at most a byte budget, as PyTorch's DDP does. This file
// decides *what* is reduced; grad_buckets.h *does* it.
#ifndef STOKER_TRAINER_COMM_BUCKET_PLAN_H_
#define STOKER_TRAINER_COMM_BUCKET_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::trainer {

// One parameter's place inside a bucket, in elements.
struct BucketSlot {
  int parameter = 0;  // index into the registration-ordered parameter list
  int64_t offset = 0;
  int64_t numel = 0;
};

struct Bucket {
  std::vector<BucketSlot> slots;  // in the order backward is expected to fill them
  int64_t numel = 0;
};

// Packs parameters (numel each, in registration order) into buckets of at most
// `bucket_bytes` bytes of `element_bytes`-sized elements, last-registered first. A
// parameter larger than the budget gets a bucket of its own. Every parameter appears
// exactly once. Pure function: the same on every rank.
std::vector<Bucket> PlanBuckets(const std::vector<int64_t>& parameter_numels, size_t element_bytes,
                                size_t bucket_bytes);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_BUCKET_PLAN_H_
