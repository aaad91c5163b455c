// StepProfiler: where the time of a training step goes (--profile_steps): waiting for data,
// host-to-device (the wait for the batch's copy plus normalisation), forward, backward,
// allreduce wait, optimizer. On a GPU the phases are intervals between CUDA events on the
// compute stream (the GPU's own timeline, stalls included) and data wait is the host's
// time blocked in BatchFeeder::Next; on the CPU everything is host clocks and the time
// spent inside gradient allreduces (which run in backward's hooks there) is moved from
// backward to allreduce wait by the caller, who measures it (MoveHostSeconds).
#ifndef STOKER_TRAINER_REPORT_STEP_PROFILER_H_
#define STOKER_TRAINER_REPORT_STEP_PROFILER_H_

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::trainer {

enum class StepPhase { kDataWait, kHostToDevice, kForward, kBackward, kAllreduceWait, kOptimizer };
inline constexpr int kStepPhaseCount = 6;
const char* StepPhaseName(StepPhase phase);  // "data_wait", "h2d", ...

// Owned by the training thread.
//
//   profiler->StartStep();
//   ... Next() ...       profiler->Mark(StepPhase::kHostToDevice);
//   ... forward ...      profiler->Mark(StepPhase::kForward);
//   ...
//   RETURN_IF_ERROR(profiler->EndStep());
class StepProfiler {
 public:
  // `cuda` selects CUDA events on `cuda_stream` (a cudaStream_t; nullptr is the default
  // stream) of `device`; otherwise host clocks.
  static absl::StatusOr<std::unique_ptr<StepProfiler>> Create(bool cuda, void* cuda_stream,
                                                              int device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Begins a profiled step; the time until the first Mark belongs to that Mark's phase.
  absl::Status StartStep();
  // The time since the previous mark (or StartStep) belongs to `phase`.
  absl::Status Mark(StepPhase phase);
  // Host time measured elsewhere (e.g. the feeder's wait for data).
  void AddHostSeconds(StepPhase phase, double seconds);
  // Moves host time from one phase to another (e.g. allreduce time spent inside backward).
  void MoveHostSeconds(StepPhase from, StepPhase to, double seconds);
  // Ends the step and adds its phases to the totals (on a GPU: waits for the last event).
  absl::Status EndStep();

  int steps() const { return steps_; }
  // Mean seconds per step of `phase`.
  double MeanSeconds(StepPhase phase) const;
  // A table: phase, ms per step, share.
  std::string Report() const;
  bool on_gpu() const { return cuda_; }

 private:
  // The CUDA events of a profiler on a GPU, one per point of a step (reused each step);
  // defined in step_profiler.cc, where CUDA is known (empty in a build without CUDA).
  struct DeviceEvents;
  StepProfiler(bool cuda, void* stream, int device);
  absl::Status Record();

  bool cuda_;
  void* stream_;  // cudaStream_t
  int device_;
  std::unique_ptr<DeviceEvents> events_;
  std::vector<StepPhase> marked_;  // phase of the interval ending at each event/time
  std::vector<std::chrono::steady_clock::time_point> times_;
  std::array<double, kStepPhaseCount> totals_{};  // seconds over all steps
  std::array<double, kStepPhaseCount> host_{};    // host seconds added this step
  int steps_ = 0;
  bool in_step_ = false;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_STEP_PROFILER_H_
