// The training device of a rank: libtorch's settings for it (CPU threads, cuDNN autotuning
// or determinism), the dtype batches are normalised to, waiting for queued work, and the
// device memory report.
#ifndef STOKER_TRAINER_DEVICE_H_
#define STOKER_TRAINER_DEVICE_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "trainer/options.h"
#include "trainer/report/step_profiler.h"
#include "trainer/run_context.h"

namespace stoker::trainer {

// The libtorch device of `context` (cuda:N or cpu).
at::Device TrainingDevice(const RunContext& context);

// Sets libtorch up for the run before the model is built: on the CPU, this rank's share of
// the node's cores; on the GPU, cuDNN autotuning, or deterministic algorithms (and cuBLAS's
// fixed workspace) with --deterministic.
void ConfigureDevice(const DeviceOptions& options, const RunContext& context);

// Note [Expandable segments]
// With --expandable_segments (the default on a GPU), the caching allocator grows one
// virtual range per stream and maps physical pages into it as it needs them, instead of
// reserving fixed segments that a later request of another size cannot reuse: the
// reserved peak then follows the allocated peak. It is set once, before the rank's first
// allocation. A PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) that names
// expandable_segments wins over the flag.

// GPU only: configures libtorch's caching allocator (Note [Expandable segments]). Call
// before anything allocates device memory through libtorch.
void ConfigureCudaAllocator(const DeviceOptions& options);

// The dtype of normalised input batches: the autocast dtype on the GPU, else float32.
at::ScalarType InputDtype(const DeviceOptions& options, const RunContext& context);

// --precision=fp8 on this rank's device: FailedPrecondition naming the flag on the CPU, or
// on a GPU without FP8 tensor cores (compute capability below 8.9), with its capability.
// OK for every other precision.
absl::Status CheckPrecisionSupported(const DeviceOptions& options, const RunContext& context);

// CheckPrecisionSupported's verdict for GPU `device` of compute capability major.minor.
absl::Status CheckFp8ComputeCapability(int device, int major, int minor);

// Whether forward runs under autocast (a GPU run below fp32).
bool UsesAutocast(const DeviceOptions& options, const RunContext& context);

// Turns autocast on for this thread, in the input dtype, when the run uses it.
void EnableAutocast(const DeviceOptions& options, const RunContext& context);

// Waits until this rank's GPU has finished all queued work (no-op on the CPU).
absl::Status WaitForDevice(const RunContext& context);

// GPU only: logs (when `log`) what tensors hold, what the caching allocator keeps and the
// peak, and releases cached blocks past --cache_release_fraction of the device.
void ReportDeviceMemory(const DeviceOptions& options, const RunContext& context, bool log);

// A step profiler timing with CUDA events on the current stream of the context's GPU, or
// with host clocks on the CPU.
absl::StatusOr<std::unique_ptr<StepProfiler>> MakeStepProfiler(const RunContext& context);

// Starts (`on`) or stops the range of the run that an attached CUDA profiler records
// (cudaProfilerStart/Stop; `ncu --profile-from-start off` then measures only the profiled
// steps). Without a profiler it does nothing; a refusal is logged, not fatal: the range
// is a help for profiling, not part of training. No-op on the CPU.
void SetDeviceProfilerRange(const RunContext& context, bool on);

// For the progress line: the GPU's current and peak allocation, or the process's resident set.
std::string MemoryText(const RunContext& context);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_DEVICE_H_
