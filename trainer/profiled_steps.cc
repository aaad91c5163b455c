#include "trainer/profiled_steps.h"

#include "common/names.h"
#include "common/status_macros.h"
#include "trainer/device.h"

namespace stoker::trainer {

absl::StatusOr<StepProfiler*> ProfiledSteps::Start(int64_t step, const TrainingModel& trained) {
  in_step_ = step >= first_ && step < first_ + count_;
  if (!in_step_) return nullptr;
  if (profiler_ == nullptr) {
    ASSIGN_OR_RETURN(profiler_, MakeStepProfiler(context_));
    SetDeviceProfilerRange(context_, true);
    if (!kernel_trace_path_.empty()) {
      const std::string path = context_.world_size() > 1
                                   ? RankFilePath(kernel_trace_path_, context_.rank.rank)
                                   : kernel_trace_path_;
      ASSIGN_OR_RETURN(kernel_trace_, KernelTrace::Start(path, kernel_trace_ops_));
    }
  }
  allreduce_before_ = trained.allreduce_seconds();
  RETURN_IF_ERROR(profiler_->StartStep());
  return profiler_.get();
}

absl::Status ProfiledSteps::DataArrived(StepProfiler* profiler, absl::Duration data_wait) {
  if (profiler == nullptr) return absl::OkStatus();
  const double wait = absl::ToDoubleSeconds(data_wait);
  if (profiler->on_gpu()) {
    profiler->AddHostSeconds(StepPhase::kDataWait, wait);
  } else {
    profiler->MoveHostSeconds(StepPhase::kHostToDevice, StepPhase::kDataWait, wait);
  }
  return profiler->Mark(StepPhase::kDataWait);
}

absl::Status ProfiledSteps::End(int64_t step, const TrainingModel& trained) {
  if (!in_step_) return absl::OkStatus();
  in_step_ = false;
  if (trained.allreduce_timed()) {
    profiler_->MoveHostSeconds(StepPhase::kBackward, StepPhase::kAllreduceWait,
                               trained.allreduce_seconds() - allreduce_before_);
  }
  RETURN_IF_ERROR(profiler_->EndStep());
  if (step + 1 == first_ + count_) {
    SetDeviceProfilerRange(context_, false);
    if (kernel_trace_ != nullptr) {
      RETURN_IF_ERROR(kernel_trace_->Stop());
      kernel_trace_.reset();
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
