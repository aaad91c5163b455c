// KernelTrace: every CUDA kernel and memory copy the GPU runs while it is on (the profiled
// steps), recorded through libtorch's Kineto profiler: CUPTI's activity records give each
// kernel's start and end on the GPU without replaying it, kernels of CUDA-graph replays
// included. Stop writes them as a Chrome trace-event JSON file (Perfetto and
// chrome://tracing open it; tools/kernel_breakdown.py classifies its kernels).
#ifndef STOKER_TRAINER_REPORT_KERNEL_TRACE_H_
#define STOKER_TRAINER_REPORT_KERNEL_TRACE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace stoker::trainer {

// One per process (the profiler is global to it); owned by the training thread. With
// `host_ops` the trace also holds the host's operator records (ATen operators, and the
// calls of an exported program: trainer/graph/graph_program.h), each kernel linked to the
// operator that launched it by its "External id".
//
//   ASSIGN_OR_RETURN(std::unique_ptr<KernelTrace> trace, KernelTrace::Start("k.json"));
//   ... steps ...
//   RETURN_IF_ERROR(trace->Stop());  // writes k.json
class KernelTrace {
 public:
  // Starts recording. Internal when libtorch's profiler cannot start (another is on, or
  // this libtorch was built without Kineto).
  static absl::StatusOr<std::unique_ptr<KernelTrace>> Start(std::string path,
                                                            bool host_ops = false);
  // Stops if still recording (without writing).
  ~KernelTrace();

  // Stops recording and writes the trace to the path given to Start. Internal naming the
  // path when it cannot be written. Once.
  absl::Status Stop();

 private:
  explicit KernelTrace(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  bool recording_ = true;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_KERNEL_TRACE_H_
