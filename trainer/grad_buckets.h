// GradBuckets: owns the flat gradient buckets of a model and reduces them across ranks.
// Each parameter's .grad is a view into its bucket, so backward writes straight into the
// memory the communicator reduces: no copy in or out.
#ifndef STOKER_TRAINER_GRAD_BUCKETS_H_
#define STOKER_TRAINER_GRAD_BUCKETS_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/bucket_plan.h"
#include "trainer/communicator.h"

namespace stoker::trainer {

// Owned by the training thread. `communicator` must outlive this object.
//
//   ASSIGN_OR_RETURN(auto buckets, GradBuckets::Create(params, names, 25 << 20, comm));
//   buckets->ZeroGrad(); loss.backward(); RETURN_IF_ERROR(buckets->AllReduceAverage());
class GradBuckets {
 public:
  // `parameters` in registration order, all of one dtype and device; `names` for error
  // messages. Replaces each parameter's .grad with a view into a bucket.
  static absl::StatusOr<std::unique_ptr<GradBuckets>> Create(
      std::vector<at::Tensor> parameters, std::vector<std::string> names, size_t bucket_bytes,
      Communicator* communicator);

  // Zeroes every bucket, and so every gradient, in place (the views stay attached).
  void ZeroGrad();

  // Sums every bucket across ranks and divides by the world size: afterwards each .grad
  // holds the gradient of the mean loss over all ranks' batches. Fails naming the first
  // parameter whose .grad was detached from its bucket (it would not be reduced).
  // Must be called in the same order on every rank.
  absl::Status AllReduceAverage();

  const std::vector<Bucket>& plan() const { return plan_; }

 private:
  GradBuckets(std::vector<at::Tensor> parameters, std::vector<std::string> names,
              std::vector<Bucket> plan, std::vector<at::Tensor> flat, Communicator* communicator);
  absl::Status CheckViewsAttached() const;

  std::vector<at::Tensor> parameters_;
  std::vector<std::string> names_;
  std::vector<Bucket> plan_;
  std::vector<at::Tensor> flat_;  // one contiguous tensor per bucket
  Communicator* communicator_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAD_BUCKETS_H_
