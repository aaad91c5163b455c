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

// The GPU's activity, and the host's operator records only when asked: they cost each
// operator's launch time.
std::set<ActivityType> Activities(bool host_ops) {
  if (host_ops) return {ActivityType::CPU, ActivityType::CUDA};
  return {ActivityType::CUDA};
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelTrace>> KernelTrace::Start(std::string path, bool host_ops) {
  // The profiler reports a failed write only in its log: the file is made here first.
  if (!std::ofstream(path, std::ios::trunc)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kernel_trace=", path, ": cannot write the file"));
  }
  const ProfilerConfig config(ProfilerState::KINETO);
  RETURN_IF_ERROR(TorchCall(absl::StrCat("--kernel_trace=", path, ": starting the profiler"), [&] {
    profiler::prepareProfiler(config, Activities(host_ops));
    profiler::enableProfiler(config, Activities(host_ops));
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
