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

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/trace_events.h"
#include "trainer/comm/device_timeline.h"
#include "trainer/comm/grad_buckets.h"
#include "trainer/nn/image_classifier.h"
#include "trainer/nn/loss_scaler.h"
#include "trainer/optim/fused_optimizer.h"
#include "trainer/report/step_profiler.h"

namespace stoker::trainer {

class CudaGraph;  // trainer/cuda_graph.h

struct TrainStepOptions {
  double label_smoothing = 0;
  double clip_grad_norm = 0;  // 0: no clipping
  bool autocast = false;      // the caller enabled autocast: clear its cache after forward
  // Capture the step in CUDA graphs and replay them (Note [Capturing the step]). Needs a
  // model on a CUDA device, made with its buckets (fixed_addresses) after
  // UseCapturableStream (trainer/cuda_graph.h), and an optimizer that keeps its learning
  // rate on the device.
  bool cuda_graphs = false;
};

// Note [Capturing the step]: with cuda_graphs, the first kUncapturedSteps optimizer steps
// run uncaptured (cuDNN picks its algorithms, the scaler makes its tensors), and so does
// every step until the optimizer has applied one (SGD's first step sets its momentum).
// Then each kind of micro-batch (first and/or last of its step) is captured once as a graph
// of the gradient zeroing (first), forward, backward and the reductions (last), and the
// rest of the step (unscale, clip, optimizer, scale update; inf/NaN skips on the device) as
// one more graph. Later steps copy their batch into the graph's inputs, set the learning
// rate's device tensor and replay: a few launches instead of thousands of kernels. Steps
// given a profiler run uncaptured, so that their phases can be timed, and so does a
// micro-batch whose shape or layout differs from its graph's. Captured and
// uncaptured steps run the same kernels on the same tensors, so they give the same bits.
// A capture that fails (a model that reads a device value on the host, say) turns graphs
// off for the rest of the run with a warning; that micro-batch then runs uncaptured.
inline constexpr int kUncapturedSteps = 3;

// Borrows everything it is given; owned by the training thread. Begin, MicroBatch (as many
// times as announced) and Finish must be called in the same order on every rank.
//
//   step.Begin(k);
//   for (int i = 0; i < k; ++i) ASSIGN_OR_RETURN(at::Tensor loss, step.MicroBatch(x[i], y[i]));
//   RETURN_IF_ERROR(step.Finish(learning_rate));
class TrainStep {
 public:
  TrainStep(ImageClassifier& model, GradBuckets& buckets, FusedOptimizer& optimizer,
            LossScaler& scaler, std::vector<at::Tensor> parameters,
            const TrainStepOptions& options);
  ~TrainStep();

  // Starts an optimizer step of `micro_batches` micro-batches (its first micro-batch zeroes
  // the gradients).
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

  // Whether the last Finish skipped the optimizer (fp16 inf/NaN). Syncs with the device
  // when that Finish was replayed.
  bool skipped() const;
  // Optimizer steps skipped since construction. Syncs with the device once steps were
  // replayed.
  int64_t skipped_steps() const;
  // The global gradient norm before clipping (float32 scalar on the device) of the last
  // Finish; undefined without clipping.
  const at::Tensor& grad_norm() const;

  // Records forward, backward (with each bucket's reduction), the optimizer and the CUDA
  // graphs replayed into `trace` (may be null) on thread `tid` while it records. Traced
  // steps run as untraced ones do: captured steps stay captured. With `timeline` (on a
  // GPU; may be null), also each bucket's reduction on the communicator's stream (trace
  // thread `comm_tid`) and each replayed graph on the training stream, the timeline's home
  // stream (`compute_tid`): Note [Timing a replayed graph] in trainer/comm/device_timeline.h.
  void set_trace(TraceRecorder* trace, int tid, DeviceTimeline* timeline = nullptr,
                 int compute_tid = 0, int comm_tid = 0) {
    trace_ = trace;
    trace_tid_ = tid;
    timeline_ = timeline;
    timeline_tid_ = compute_tid;
    buckets_.set_trace(trace, tid, timeline, comm_tid);
  }

  // Graphs captured so far (Note [Capturing the step]) and the micro-batches and Finish
  // calls that replayed one.
  int graphs_captured() const;
  int64_t replays() const { return replays_; }

 private:
  struct MicroBatchGraph;
  struct FinishGraph;
  struct Graphs;

  bool UseGraphs(const StepProfiler* profiler) const;
  bool ReadyToCapture() const;
  // The graph for a micro-batch of this kind, captured now if the step is ready; nullptr
  // when it runs uncaptured.
  absl::StatusOr<MicroBatchGraph*> GraphForMicroBatch(bool first, bool last,
                                                      const at::Tensor& images,
                                                      const at::Tensor& labels);
  absl::StatusOr<FinishGraph*> GraphForFinish();
  // Replays `graph`, timed as one interval named `name` on the timeline when there is one.
  absl::Status TimedReplay(CudaGraph& graph, const char* name);
  // Forward (with a profiler mark after it) and scaled backward of one micro-batch.
  absl::StatusOr<at::Tensor> ForwardBackward(const at::Tensor& images, const at::Tensor& labels,
                                             StepProfiler* profiler);
  // Unscale, clip, optimizer and scaler update; a found inf/NaN skips on the host (a sync)
  // or, `on_device`, inside the optimizer's kernels.
  absl::Status UpdateParameters(bool on_device);
  void DisableGraphs(const absl::Status& why);

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
  int64_t skipped_uncaptured_ = 0;
  int64_t uncaptured_steps_ = 0;
  bool applied_a_step_ = false;  // an uncaptured Finish ran the optimizer
  bool last_finish_replayed_ = false;
  int64_t replays_ = 0;
  std::unique_ptr<Graphs> graphs_;  // with cuda_graphs, until a capture fails
  TraceRecorder* trace_ = nullptr;
  int trace_tid_ = 0;
  DeviceTimeline* timeline_ = nullptr;
  int timeline_tid_ = 0;
};

// Scales the gradients in place so that their global L2 norm is at most `max_norm`
// (torch.nn.utils.clip_grad_norm_ with its foreach kernels: no host sync). Returns the norm
// before clipping.
at::Tensor ClipGradNorm(std::vector<at::Tensor>& grads, double max_norm);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRAIN_STEP_H_
