#include "trainer/train_step.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/cuda_graph.h"

namespace stoker::trainer {

at::Tensor ClipGradNorm(std::vector<at::Tensor>& grads, double max_norm) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  const at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  // As torch.nn.utils.clip_grad_norm_: multiply by min(1, max_norm / (total + 1e-6)).
  const at::Tensor coefficient = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  at::_foreach_mul_(grads, coefficient);
  return total;
}

// A captured micro-batch: its inputs, and its loss, copied out by the graph (cuda_graph.h:
// what a graph allocates is scratch that the pool's other graphs reuse).
struct TrainStep::MicroBatchGraph {
  std::unique_ptr<CudaGraph> graph;
  at::Tensor images;
  at::Tensor labels;
  at::Tensor loss;  // float32, 0-dim
};

// The captured rest of a step, and what it reports.
struct TrainStep::FinishGraph {
  std::unique_ptr<CudaGraph> graph;
  at::Tensor grad_norm;  // float32, 0-dim; with clipping
  at::Tensor found_inf;  // float32, 0-dim; with loss scaling
};

struct TrainStep::Graphs {
  explicit Graphs(GraphPool pool) : pool(std::move(pool)) {}
  GraphPool pool;
  std::map<std::pair<bool, bool>, MicroBatchGraph> micro_batches;  // by (first, last)
  absl::optional<FinishGraph> finish;
  at::Tensor skipped;  // float32, 0-dim: steps the finish graph skipped
};

TrainStep::TrainStep(ImageClassifier& model, GradBuckets& buckets, FusedOptimizer& optimizer,
                     LossScaler& scaler, std::vector<at::Tensor> parameters,
                     const TrainStepOptions& options)
    : model_(model),
      buckets_(buckets),
      optimizer_(optimizer),
      scaler_(scaler),
      parameters_(std::move(parameters)),
      options_(options) {}

TrainStep::~TrainStep() = default;

void TrainStep::Begin(int micro_batches) {
  micro_batches_ = micro_batches;
  done_ = 0;
}

bool TrainStep::UseGraphs(const StepProfiler* profiler) const {
  return options_.cuda_graphs && profiler == nullptr;
}

bool TrainStep::ReadyToCapture() const {
  return uncaptured_steps_ >= kUncapturedSteps && applied_a_step_;
}

void TrainStep::DisableGraphs(const absl::Status& why) {
  LogWarning("CUDA graphs are off for the rest of the run (the step runs uncaptured): %s",
             why.message());
  // The graphs already made stay: one may still be running, and their memory with it.
  options_.cuda_graphs = false;
}

absl::StatusOr<at::Tensor> TrainStep::ForwardBackward(const at::Tensor& images,
                                                      const at::Tensor& labels,
                                                      StepProfiler* profiler) {
  const std::string micro_batch =
      absl::StrCat(" of micro-batch ", done_ + 1, " of ", micro_batches_);
  absl::optional<TraceSpan> forward;
  forward.emplace(trace_, trace_tid_, "forward", "compute");
  ASSIGN_OR_RETURN(
      at::Tensor loss, TorchCall(absl::StrCat("train step: forward", micro_batch), [&] {
        at::Tensor loss = at::cross_entropy_loss(model_.forward(images), labels, /*weight=*/{},
                                                 at::Reduction::Mean, /*ignore_index=*/-100,
                                                 options_.label_smoothing);
        if (options_.autocast) at::autocast::clear_cache();
        return loss;
      }));
  forward.reset();
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kForward));
  TraceSpan backward(trace_, trace_tid_, "backward", "compute");
  RETURN_IF_ERROR(TorchCall(absl::StrCat("train step: backward", micro_batch), [&] {
    const at::Tensor objective = micro_batches_ > 1 ? loss / micro_batches_ : loss;
    scaler_.Scale(objective).backward();
  }));
  return loss;
}

absl::Status TrainStep::TimedReplay(CudaGraph& graph, const char* name) {
  // Outside the traced window, no label (the timeline's lock, a string, the arguments):
  // Started would record nothing.
  if (timeline_ == nullptr || trace_ == nullptr || !trace_->recording()) return graph.Replay();
  // Note [Timing a replayed graph] in trainer/comm/device_timeline.h.
  timeline_->Label(timeline_tid_, name, TraceArgs().Add("replay", replays_));
  const int timed = timeline_->Started();
  absl::Status replayed = graph.Replay();
  timeline_->Done(timed);
  return replayed;
}

absl::StatusOr<TrainStep::MicroBatchGraph*> TrainStep::GraphForMicroBatch(
    bool first, bool last, const at::Tensor& images, const at::Tensor& labels) {
  if (graphs_ != nullptr) {
    auto found = graphs_->micro_batches.find({first, last});
    if (found != graphs_->micro_batches.end()) {
      // A batch of another shape or layout runs uncaptured (and is not captured: the loop's
      // training batches all have one shape).
      const MicroBatchGraph& graph = found->second;
      const bool same = graph.images.sizes() == images.sizes() &&
                        graph.images.strides() == images.strides() &&
                        graph.images.scalar_type() == images.scalar_type() &&
                        graph.labels.sizes() == labels.sizes() &&
                        graph.labels.scalar_type() == labels.scalar_type();
      return same ? &found->second : nullptr;
    }
  }
  if (!ReadyToCapture()) return nullptr;
  if (graphs_ == nullptr) {
    absl::StatusOr<GraphPool> pool = GraphPool::Create();
    if (!pool.ok()) {
      DisableGraphs(pool.status());
      return nullptr;
    }
    graphs_ = std::make_unique<Graphs>(std::move(*pool));
  }
  MicroBatchGraph graph;
  RETURN_IF_ERROR(TorchCall("train step: the inputs of a CUDA graph", [&] {
    graph.images = at::empty_like(images);
    graph.labels = at::empty_like(labels);
    graph.loss = at::empty({}, images.options().dtype(at::kFloat));
  }));
  absl::StatusOr<std::unique_ptr<CudaGraph>> captured =
      CudaGraph::Capture(graphs_->pool, model_.DeviceGenerators(), [&]() -> absl::Status {
        if (options_.autocast) at::autocast::clear_cache();
        if (first) buckets_.ZeroGrad();
        buckets_.BeginStep(/*reduce=*/last);
        ASSIGN_OR_RETURN(at::Tensor loss, ForwardBackward(graph.images, graph.labels, nullptr));
        RETURN_IF_ERROR(buckets_.FinishStep());
        graph.loss.copy_(loss);
        return absl::OkStatus();
      });
  if (!captured.ok()) {
    // Autocast caches the weights it cast in the failed forward: casts the graph recorded
    // and never ran.
    if (options_.autocast) at::autocast::clear_cache();
    DisableGraphs(captured.status());
    return nullptr;
  }
  graph.graph = std::move(*captured);
  return &graphs_->micro_batches.emplace(std::make_pair(first, last), std::move(graph))
              .first->second;
}

absl::StatusOr<at::Tensor> TrainStep::MicroBatch(const at::Tensor& images, const at::Tensor& labels,
                                                 StepProfiler* profiler) {
  if (done_ >= micro_batches_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TrainStep: micro-batch ", done_ + 1, " of a step announced with ", micro_batches_));
  }
  const bool first = done_ == 0;
  const bool last = done_ + 1 == micro_batches_;
  if (UseGraphs(profiler)) {
    ASSIGN_OR_RETURN(MicroBatchGraph * graph, GraphForMicroBatch(first, last, images, labels));
    if (graph != nullptr) {
      RETURN_IF_ERROR(TorchCall("train step: the inputs of a CUDA graph", [&] {
        graph->images.copy_(images);
        graph->labels.copy_(labels);
      }));
      {
        TraceSpan replay(trace_, trace_tid_, "CUDA graph replay: forward and backward", "compute");
        RETURN_IF_ERROR(TimedReplay(*graph->graph, last ? "GPU: CUDA graph replay: forward, "
                                                          "backward and the reductions"
                                                        : "GPU: CUDA graph replay: forward "
                                                          "and backward"));
      }
      if (last) RETURN_IF_ERROR(buckets_.WatchReplay());
      ++replays_;
      ++done_;
      return TorchCall("train step: the loss of a CUDA graph", [&] { return graph->loss.clone(); });
    }
  }
  if (first)
    RETURN_IF_ERROR(TorchCall("train step: zeroing the gradients", [&] { buckets_.ZeroGrad(); }));
  buckets_.BeginStep(/*reduce=*/last);
  ASSIGN_OR_RETURN(at::Tensor loss, ForwardBackward(images, labels, profiler));
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kBackward));
  {
    TraceSpan wait(trace_, trace_tid_, "gradient reductions: wait", "communication");
    RETURN_IF_ERROR(buckets_.FinishStep());
  }
  if (last && profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kAllreduceWait));
  ++done_;
  return loss.detach();
}

absl::Status TrainStep::UpdateParameters(bool on_device) {
  std::vector<at::Tensor> grads;
  grads.reserve(parameters_.size());
  for (const at::Tensor& p : parameters_) grads.push_back(p.grad());
  skipped_ = false;
  if (!scaler_.enabled()) {
    if (options_.clip_grad_norm > 0) grad_norm_ = ClipGradNorm(grads, options_.clip_grad_norm);
    optimizer_.Step();
    return absl::OkStatus();
  }
  // Every rank holds the same averaged gradients, so every rank skips the same steps.
  RETURN_IF_ERROR(scaler_.Unscale(grads));
  if (options_.clip_grad_norm > 0) grad_norm_ = ClipGradNorm(grads, options_.clip_grad_norm);
  if (on_device) {
    const at::Tensor found_inf = scaler_.found_inf();
    optimizer_.Step(found_inf);
    graphs_->finish->found_inf.copy_(found_inf);
    graphs_->skipped.add_(found_inf);
  } else {
    RETURN_IF_ERROR(scaler_.Step([&] {
      optimizer_.Step();
      return absl::OkStatus();
    }));
    skipped_ = scaler_.StepSkipped();
  }
  return scaler_.Update();
}

absl::StatusOr<TrainStep::FinishGraph*> TrainStep::GraphForFinish() {
  if (graphs_ == nullptr) return nullptr;  // no micro-batch was captured
  if (graphs_->finish.has_value()) return &*graphs_->finish;
  if (!ReadyToCapture()) return nullptr;
  RETURN_IF_ERROR(TorchCall("train step: the outputs of a CUDA graph", [&] {
    const at::TensorOptions scalar = parameters_.front().options().dtype(at::kFloat);
    graphs_->finish.emplace();
    graphs_->finish->grad_norm = at::zeros({}, scalar);
    graphs_->finish->found_inf = at::zeros({}, scalar);
    graphs_->skipped = at::zeros({}, scalar);
  }));
  absl::StatusOr<std::unique_ptr<CudaGraph>> captured =
      CudaGraph::Capture(graphs_->pool, {}, [&]() -> absl::Status {
        RETURN_IF_ERROR(UpdateParameters(/*on_device=*/true));
        if (options_.clip_grad_norm > 0) graphs_->finish->grad_norm.copy_(grad_norm_);
        return absl::OkStatus();
      });
  grad_norm_ = at::Tensor();  // the capture's scratch
  if (!captured.ok()) {
    // The scaler and optimizer have no state to fall back from: a failure here is the
    // step's own, not the model's.
    return absl::Status(captured.status().code(),
                        absl::StrCat("train step: ", captured.status().message(),
                                     " (--nocuda_graphs runs the step uncaptured)"));
  }
  graphs_->finish->graph = std::move(*captured);
  return &*graphs_->finish;
}

absl::Status TrainStep::Finish(double learning_rate, StepProfiler* profiler) {
  if (done_ != micro_batches_) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainStep: Finish after ", done_, " of ", micro_batches_, " micro-batches"));
  }
  RETURN_IF_ERROR(TorchCall("train step: setting the learning rate",
                            [&] { optimizer_.set_learning_rate(learning_rate); }));
  if (UseGraphs(profiler)) {
    // Capturing ran the optimizer's host side once, for the step replayed right after it;
    // every later replay is a step of its own.
    const bool captured_before = graphs_ != nullptr && graphs_->finish.has_value();
    ASSIGN_OR_RETURN(FinishGraph * graph, GraphForFinish());
    if (graph != nullptr) {
      if (captured_before) optimizer_.CountReplayedStep();
      TraceSpan replay(trace_, trace_tid_, "CUDA graph replay: optimizer", "compute");
      RETURN_IF_ERROR(TimedReplay(*graph->graph, "GPU: CUDA graph replay: optimizer"));
      last_finish_replayed_ = true;
      ++replays_;
      return absl::OkStatus();
    }
  }
  {
    TraceSpan optimizer(trace_, trace_tid_, "optimizer", "compute");
    RETURN_IF_ERROR(TorchCall("train step: unscale, clip and optimizer step",
                              [&] { return UpdateParameters(/*on_device=*/false); }));
  }
  last_finish_replayed_ = false;
  ++uncaptured_steps_;
  if (skipped_) {
    ++skipped_uncaptured_;
  } else {
    applied_a_step_ = true;
  }
  if (profiler != nullptr) RETURN_IF_ERROR(profiler->Mark(StepPhase::kOptimizer));
  return absl::OkStatus();
}

bool TrainStep::skipped() const {
  if (!last_finish_replayed_ || !scaler_.enabled()) return skipped_;
  return graphs_->finish->found_inf.item<float>() != 0.0f;
}

int64_t TrainStep::skipped_steps() const {
  if (graphs_ == nullptr || !graphs_->finish.has_value()) return skipped_uncaptured_;
  return skipped_uncaptured_ + static_cast<int64_t>(graphs_->skipped.item<float>());
}

const at::Tensor& TrainStep::grad_norm() const {
  return last_finish_replayed_ ? graphs_->finish->grad_norm : grad_norm_;
}

int TrainStep::graphs_captured() const {
  if (graphs_ == nullptr) return 0;
  return static_cast<int>(graphs_->micro_batches.size()) + (graphs_->finish.has_value() ? 1 : 0);
}

}  // namespace stoker::trainer
