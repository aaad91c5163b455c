// ProfiledSteps: the steps of a run that the step profiler times (--profile_steps of them,
// after the --warmup_steps), the one profiler they share (made at the first), and the CUDA
// profiler range around them, so that an external profiler can capture those steps alone,
// and, when asked, their GPU kernels recorded in-process (trainer/report/kernel_trace.h).
// On the CPU the gradient allreduces' host seconds (timed apart by the training model's
// TimedCommunicator) move from backward to the allreduce wait. Owned by the training thread.
#ifndef STOKER_TRAINER_PROFILED_STEPS_H_
#define STOKER_TRAINER_PROFILED_STEPS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/report/kernel_trace.h"
#include "trainer/report/step_profiler.h"
#include "trainer/run_context.h"
#include "trainer/training_model.h"

namespace stoker::trainer {

class ProfiledSteps {
 public:
  // Profiles steps [first, first + count) of the run (0-based, counted by the caller).
  // `kernel_trace`: where the steps' kernel trace goes ("": none); `kernel_trace_ops`: with
  // the host's operator records (KernelTrace::Start).
  ProfiledSteps(const RunContext& context, int64_t first, int64_t count, std::string kernel_trace,
                bool kernel_trace_ops)
      : context_(context),
        first_(first),
        count_(count),
        kernel_trace_path_(std::move(kernel_trace)),
        kernel_trace_ops_(kernel_trace_ops) {}

  // The started profiler when step `step` is profiled, else nullptr.
  absl::StatusOr<StepProfiler*> Start(int64_t step, const TrainingModel& trained);
  // After a profiled step's batch arrived (`profiler` from Start, nullptr when unprofiled):
  // the feeder's wait for the data service becomes the data-wait phase, which then also
  // takes the stop vote's wait for the other ranks' data.
  absl::Status DataArrived(StepProfiler* profiler, absl::Duration data_wait);
  // Ends the step Start profiled; nothing when it profiled none.
  absl::Status End(int64_t step, const TrainingModel& trained);

  // The profiler with every profiled step so far; nullptr when none ran.
  const StepProfiler* profiler() const { return profiler_.get(); }

 private:
  const RunContext& context_;
  const int64_t first_;
  const int64_t count_;
  const std::string kernel_trace_path_;
  const bool kernel_trace_ops_;
  std::unique_ptr<StepProfiler> profiler_;
  std::unique_ptr<KernelTrace> kernel_trace_;  // while the profiled steps run
  bool in_step_ = false;
  double allreduce_before_ = 0;  // the training model's allreduce seconds at Start
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_PROFILED_STEPS_H_
