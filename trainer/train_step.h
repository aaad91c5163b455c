// TrainStep: one optimizer step of the training loop, over one or more micro-batches
// (gradient accumulation): forward under the caller's autocast setting, cross-entropy with
// label smoothing, (scaled) backward whose gradient reduction across ranks runs only in the
// last micro-batch's backward, then unscaling (fp16), gradient clipping on the unscaled
// gradients, the optimizer step (skipped by the loss scaler on inf/NaN) and the scaler's
// update. With K micro-batches of equal size each loss is divided by K, so the gradient is
// that of the mean loss over all K * world_size micro-batches: the large-batch gradient.
#ifndef STOKER_TRAINER_TRAIN_STEP_H_
#define STOKER_TRAINER_TRAIN_STEP_H_

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/statusor.h"
#include "trainer/optim/fused_optimizer.h"
#include "trainer/comm/grad_buckets.h"
#include "trainer/nn/image_classifier.h"
#include "trainer/nn/loss_scaler.h"
#include "trainer/report/step_profiler.h"

namespace stoker::trainer {

struct TrainStepOptions {
  double label_smoothing = 0;
  double clip_grad_norm = 0;  // 0: no clipping
  bool autocast = false;      // the caller enabled autocast: clear its cache after forward
};

// Borrows everything it is given; owned by the training thread. Begin, MicroBatch (as many
// times as announced) and Finish must be called in the same order on every rank.
//
//   step.Begin(k);
//   for (int i = 0; i < k; ++i) ASSIGN_OR_RETURN(at::Tensor loss, step.MicroBatch(x[i], y[i]));
//   RETURN_IF_ERROR(step.Finish(learning_rate));
class TrainStep {
 public:
  TrainStep(ImageClassifier& model, GradBuckets& buckets, FusedOptimizer& optimizer,
            LossScaler& scaler, std::vector<at::Tensor> parameters, const TrainStepOptions& options);

  // Starts an optimizer step of `micro_batches` micro-batches: zeroes the gradients.
  void Begin(int micro_batches);

  // Forward and backward of the next micro-batch; returns its loss (detached, the mean over
  // its samples, not divided by the number of micro-batches). The gradients are averaged
  // over ranks during the last micro-batch's backward only. `profiler` (optional) gets the
  // forward and backward marks.
  absl::StatusOr<at::Tensor> MicroBatch(const at::Tensor& images, const at::Tensor& labels,
                                        StepProfiler* profiler = nullptr);

  // After the last micro-batch: unscales, clips, steps the optimizer at `learning_rate`
  // (unless the scaler skips the step) and updates the scaler. FailedPrecondition if fewer
  // micro-batches ran than Begin announced.
  absl::Status Finish(double learning_rate, StepProfiler* profiler = nullptr);

  // Whether the last Finish skipped the optimizer (fp16 inf/NaN).
  bool skipped() const { return skipped_; }
  // The global gradient norm before clipping (float32 scalar on the device); undefined
  // without clipping.
  const at::Tensor& grad_norm() const { return grad_norm_; }

 private:
  ImageClassifier& model_;
  GradBuckets& buckets_;
  FusedOptimizer& optimizer_;
  LossScaler& scaler_;
  std::vector<at::Tensor> parameters_;
  TrainStepOptions options_;
  int micro_batches_ = 0;
  int done_ = 0;
  bool skipped_ = false;
  at::Tensor grad_norm_;
};

// Scales the gradients in place so that their global L2 norm is at most `max_norm`
// (torch.nn.utils.clip_grad_norm_ with its foreach kernels: no host sync). Returns the norm
// before clipping.
at::Tensor ClipGradNorm(std::vector<at::Tensor>& grads, double max_norm);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAIN_STEP_H_
