// GradBuckets: owns the flat gradient buckets of a model and reduces them across ranks
// while backward is still running. With more than one rank, each parameter's .grad is a
// view into its bucket, so
// backward accumulates straight into the memory the communicator reduces (no copy). An
// autograd hook on each parameter's gradient accumulator counts down its bucket; a bucket
// whose gradients are all in is reduced at once, in bucket order, as PyTorch's DDP does.
// BucketPlan decides what goes together; this class does the reducing.
#ifndef STOKER_TRAINER_COMM_GRAD_BUCKETS_H_
#define STOKER_TRAINER_COMM_GRAD_BUCKETS_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/trace_events.h"
#include "trainer/comm/bucket_plan.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/device_timeline.h"

namespace stoker::trainer {

// Used by the training thread and by autograd's threads during backward (the hooks); the
// training thread must not call it while a backward pass runs. `communicator` must
// outlive this object and be usable from the thread that runs the hooks (on the CPU
// that is the thread that calls backward()).
//
//   ASSIGN_OR_RETURN(auto buckets, GradBuckets::Create(params, names, 25 << 20, comm));
//   buckets->ZeroGrad();
//   buckets->BeginStep(/*reduce=*/true);
//   loss.backward();
//   RETURN_IF_ERROR(buckets->FinishStep());  // gradients are now the mean over ranks
class GradBuckets {
 public:
  // `parameters` in registration order, all of one dtype and device; `names` for error
  // messages. Replaces each parameter's .grad with a view into a bucket and hooks its
  // gradient accumulator. With one rank the gradients stay autograd's own tensors unless
  // `fixed_addresses` (a captured CUDA graph needs every gradient at the same address in
  // each step: the buckets are made, and only the reduction is left out).
  static absl::StatusOr<std::unique_ptr<GradBuckets>> Create(std::vector<at::Tensor> parameters,
                                                             std::vector<std::string> names,
                                                             size_t bucket_bytes,
                                                             Communicator* communicator,
                                                             bool fixed_addresses = false);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Zeroes every bucket, and so every gradient, in place (the views stay attached). With
  // one rank and no buckets, the gradients are reset and autograd makes new ones.
  void ZeroGrad();

  // Arms the hooks for the next backward pass. With `reduce` false, gradients only
  // accumulate locally (a micro-batch of gradient accumulation: no communication).
  void BeginStep(bool reduce);

  // After backward: checks that every bucket was reduced (else fails naming the
  // parameters that got no gradient) and orders what follows after the reductions
  // (Communicator::Synchronize). Afterwards each .grad holds the gradient of the mean
  // loss over all ranks' batches. Must be called in the same order on every rank.
  absl::Status FinishStep();

  // After a replayed CUDA graph that holds this step's reductions: lets the communicator's
  // watchdog bound them (Communicator::WatchCurrentStream). Nothing to do with one rank.
  absl::Status WatchReplay();

  const std::vector<Bucket>& plan() const { return plan_; }
  // Buckets reduced so far in this step (for tests of the overlap).
  int buckets_launched() const { return next_to_launch_; }

  // Records each bucket's reduction in `trace` (may be null) on thread `tid` while it
  // records: an instant when the bucket is issued, and a slice from issue until the
  // communicator returns (a host communicator's reduction is done then; a device
  // communicator's is enqueued). With `timeline` (a device communicator's, may be null),
  // also when the reduction ran on the communicator's stream, on trace thread
  // `timeline_tid`. Each of them carries the bucket, its bytes and the reducing step's
  // number among this object's (`round`), which pair them.
  void set_trace(TraceRecorder* trace, int tid, DeviceTimeline* timeline = nullptr,
                 int timeline_tid = 0);

 private:
  struct Hooks;
  GradBuckets(std::vector<at::Tensor> parameters, std::vector<std::string> names,
              std::vector<Bucket> plan, std::vector<at::Tensor> flat, Communicator* communicator);
  void OnGradientReady(int parameter);
  absl::Status Launch(int bucket);

  std::vector<at::Tensor> parameters_;
  std::vector<std::string> names_;
  std::vector<Bucket> plan_;
  std::vector<at::Tensor> flat_;       // one contiguous tensor per bucket
  std::vector<int> bucket_of_;         // parameter -> bucket
  std::vector<int> pending_;           // bucket -> gradients still to come this step
  std::vector<char> ready_this_step_;  // parameter -> its gradient arrived
  Communicator* communicator_;
  TraceRecorder* trace_ = nullptr;
  int trace_tid_ = 0;
  DeviceTimeline* timeline_ = nullptr;
  int timeline_tid_ = 0;
  int64_t rounds_ = 0;  // BeginStep calls that reduce
  bool reduce_ = true;
  bool armed_ = false;
  int next_to_launch_ = 0;
  absl::Status hook_status_;      // first failure inside a hook
  std::unique_ptr<Hooks> hooks_;  // declared last: unhooked first
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_GRAD_BUCKETS_H_
