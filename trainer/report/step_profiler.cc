#include "trainer/report/step_profiler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "common/cuda_stream.h"
#endif

namespace stoker::trainer {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

#ifdef STOKER_WITH_CUDA
struct StepProfiler::DeviceEvents {
  std::vector<CudaEvent> events;  // timing events; [0] is the step's start
};
#else
struct StepProfiler::DeviceEvents {};
#endif

const char* StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kDataWait:
      return "data_wait";
    case StepPhase::kHostToDevice:
      return "h2d";
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kAllreduceWait:
      return "allreduce_wait";
    case StepPhase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<StepProfiler>> StepProfiler::Create(bool cuda, void* cuda_stream,
                                                                   int device) {
#ifndef STOKER_WITH_CUDA
  if (cuda) return absl::FailedPreconditionError("StepProfiler: this build has no CUDA");
#endif
  return std::unique_ptr<StepProfiler>(new StepProfiler(cuda, cuda_stream, device));
}

StepProfiler::StepProfiler(bool cuda, void* stream, int device)
    : cuda_(cuda), stream_(stream), device_(device), events_(std::make_unique<DeviceEvents>()) {}

StepProfiler::~StepProfiler() = default;

absl::Status StepProfiler::Record() {
  const size_t index = marked_.size();  // the event for this point (index 0: StartStep)
  if (!cuda_) {
    times_.push_back(Clock::now());
    return absl::OkStatus();
  }
#ifdef STOKER_WITH_CUDA
  std::vector<CudaEvent>& events = events_->events;
  if (index >= events.size()) {
    ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(cudaEventDefault));
    events.push_back(std::move(event));
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(events[index].get(), static_cast<cudaStream_t>(stream_)),
                 "cudaEventRecord (profiler)"));
#endif
  return absl::OkStatus();
}

absl::Status StepProfiler::StartStep() {
  marked_.clear();
  times_.clear();
  host_.fill(0);
  in_step_ = true;
  RETURN_IF_ERROR(Record());
  marked_.push_back(StepPhase::kDataWait);  // placeholder for the start point
  return absl::OkStatus();
}

absl::Status StepProfiler::Mark(StepPhase phase) {
  if (!in_step_) return absl::OkStatus();
  RETURN_IF_ERROR(Record());
  marked_.push_back(phase);
  return absl::OkStatus();
}

void StepProfiler::AddHostSeconds(StepPhase phase, double seconds) {
  if (in_step_) host_[static_cast<int>(phase)] += seconds;
}

void StepProfiler::MoveHostSeconds(StepPhase from, StepPhase to, double seconds) {
  if (!in_step_) return;
  host_[static_cast<int>(from)] -= seconds;
  host_[static_cast<int>(to)] += seconds;
}

absl::Status StepProfiler::EndStep() {
  if (!in_step_) return absl::OkStatus();
  in_step_ = false;
  std::array<double, kStepPhaseCount> step{};
  if (!cuda_) {
    for (size_t i = 1; i < times_.size(); ++i) {
      step[static_cast<int>(marked_[i])] +=
          std::chrono::duration<double>(times_[i] - times_[i - 1]).count();
    }
  } else {
#ifdef STOKER_WITH_CUDA
    const std::vector<CudaEvent>& events = events_->events;
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events[marked_.size() - 1].get()),
                               "cudaEventSynchronize (profiler)"));
    for (size_t i = 1; i < marked_.size(); ++i) {
      float ms = 0;
      RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, events[i - 1].get(), events[i].get()),
                                 "cudaEventElapsedTime (profiler)"));
      step[static_cast<int>(marked_[i])] += ms / 1000.0;
    }
#endif
  }
  for (int p = 0; p < kStepPhaseCount; ++p) totals_[p] += step[p] + host_[p];
  ++steps_;
  return absl::OkStatus();
}

double StepProfiler::MeanSeconds(StepPhase phase) const {
  return steps_ == 0 ? 0 : totals_[static_cast<int>(phase)] / steps_;
}

std::string StepProfiler::Report() const {
  double total = 0;
  for (double t : totals_) total += t;
  std::string out = absl::StrFormat("time per step over %d profiled steps (%s):\n", steps_,
                                    cuda_ ? "CUDA events; data wait is host time" : "host clocks");
  for (int p = 0; p < kStepPhaseCount; ++p) {
    const double mean = steps_ == 0 ? 0 : totals_[p] / steps_;
    absl::StrAppendFormat(&out, "  %-15s %9.3f ms  %5.1f%%\n",
                          StepPhaseName(static_cast<StepPhase>(p)), mean * 1e3,
                          total > 0 ? 100.0 * totals_[p] / total : 0.0);
  }
  absl::StrAppendFormat(&out, "  %-15s %9.3f ms", "total",
                        steps_ == 0 ? 0.0 : total / steps_ * 1e3);
  return out;
}

}  // namespace stoker::trainer
