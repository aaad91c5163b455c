#include "trainer/report/kernel_trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace stoker::trainer {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// The GPU's activity only: host-side operator records would cost each op's launch time.
const std::set<ActivityType>& Activities() {
  static const std::set<ActivityType> activities = {ActivityType::CUDA};
  return activities;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelTrace>> KernelTrace::Start(std::string path) {
  // The profiler reports a failed write only in its log: the file is made here first.
  if (!std::ofstream(path, std::ios::trunc)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kernel_trace=", path, ": cannot write the file"));
  }
  const ProfilerConfig config(ProfilerState::KINETO);
  RETURN_IF_ERROR(TorchCall(absl::StrCat("--kernel_trace=", path, ": starting the profiler"), [&] {
    profiler::prepareProfiler(config, Activities());
    profiler::enableProfiler(config, Activities());
  }));
  return std::unique_ptr<KernelTrace>(new KernelTrace(std::move(path)));
}

KernelTrace::~KernelTrace() {
  if (recording_) (void)TorchCall("stopping the kernel trace", [] { profiler::disableProfiler(); });
}

absl::Status KernelTrace::Stop() {
  recording_ = false;
  RETURN_IF_ERROR(TorchCall(absl::StrCat("--kernel_trace=", path_, ": writing the trace"),
                            [&] { profiler::disableProfiler()->save(path_); }));
  std::ifstream written(path_, std::ios::ate);
  if (!written || written.tellg() <= 0)
    return absl::InternalError(
        absl::StrCat("--kernel_trace=", path_, ": the trace was not written"));
  return absl::OkStatus();
}

}  // namespace stoker::trainer
