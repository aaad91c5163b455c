#include "trainer/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "trainer/report/progress.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#endif

namespace stoker::trainer {

at::Device TrainingDevice(const RunContext& context) {
  return context.use_cuda ? at::Device(at::kCUDA, context.cuda_device) : at::Device(at::kCPU);
}

void ConfigureDevice(const DeviceOptions& options, const RunContext& context) {
  if (!context.use_cuda) {
    // CPU ranks share the node's cores.
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, cores / std::max(1, context.rank.local_size)));
  } else if (options.deterministic) {
    // cuBLAS needs a fixed workspace configuration for deterministic results; it reads the
    // variable when its first handle is made, after this.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setBenchmarkCuDNN(false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  } else {
    at::globalContext().setBenchmarkCuDNN(options.cudnn_benchmark);
  }
}

void ConfigureCudaAllocator(const DeviceOptions& options) {
#ifdef STOKER_WITH_CUDA
  for (const char* variable : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && absl::StrContains(value, "expandable_segments")) {
      LogInfo(
          "%s=%s: the caching allocator's segments are as it says (--expandable_segments "
          "is not applied)",
          variable, value);
      return;
    }
  }
  c10::CachingAllocator::setAllocatorSettings(
      options.expandable_segments ? "expandable_segments:True" : "expandable_segments:False");
#else
  (void)options;
#endif
}

at::ScalarType InputDtype(const DeviceOptions& options, const RunContext& context) {
  if (!context.use_cuda || options.precision == Precision::kFloat32) return at::kFloat;
  // kFp8 is bf16 autocast, with the linear layers' matrix products in FP8.
  return options.precision == Precision::kFloat16 ? at::kHalf : at::kBFloat16;
}

absl::Status CheckPrecisionSupported(const DeviceOptions& options, const RunContext& context) {
  if (options.precision != Precision::kFp8) return absl::OkStatus();
  if (!context.use_cuda) {
    return absl::FailedPreconditionError(
        "--precision=fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer); "
        "this rank runs on the CPU");
  }
#ifdef STOKER_WITH_CUDA
  int major = 0, minor = 0;
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, context.cuda_device),
      "cudaDeviceGetAttribute(major)"));
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, context.cuda_device),
      "cudaDeviceGetAttribute(minor)"));
  return CheckFp8ComputeCapability(context.cuda_device, major, minor);
#else
  return absl::OkStatus();
#endif
}

absl::Status CheckFp8ComputeCapability(int device, int major, int minor) {
  if (major > 8 || (major == 8 && minor >= 9)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--precision=fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer: "
      "Ada, Hopper and later); GPU %d has compute capability %d.%d: use --precision=bf16",
      device, major, minor));
}

bool UsesAutocast(const DeviceOptions& options, const RunContext& context) {
  return context.use_cuda && options.precision != Precision::kFloat32;
}

void EnableAutocast(const DeviceOptions& options, const RunContext& context) {
  if (!UsesAutocast(options, context)) return;
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, InputDtype(options, context));
}

absl::Status WaitForDevice(const RunContext& context) {
#ifdef STOKER_WITH_CUDA
  if (context.use_cuda) return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
  (void)context;
  return absl::OkStatus();
}

void ReportDeviceMemory(const DeviceOptions& options, const RunContext& context, bool log) {
#ifdef STOKER_WITH_CUDA
  if (!context.use_cuda) return;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(context.cuda_device);
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const double gib = 1024.0 * 1024 * 1024;
  const double allocated = stats.allocated_bytes[aggregate].current / gib;
  const double reserved = stats.reserved_bytes[aggregate].current / gib;
  const double peak = stats.allocated_bytes[aggregate].peak / gib;
  // CUDA graphs keep their scratch reserved, not allocated: the reserved peak is the
  // footprint to compare.
  const double reserved_peak = stats.reserved_bytes[aggregate].peak / gib;
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  if (log) {
    LogInfo(
        "rank %d GPU %d memory: allocated %.2f GiB, reserved %.2f GiB (peak reserved %.2f GiB), "
        "peak %.2f GiB of %.1f GiB",
        context.rank.rank, context.cuda_device, allocated, reserved, reserved_peak, peak,
        total_bytes / gib);
  }
  if (reserved * gib > options.cache_release_fraction * total_bytes) {
    LogWarning("reserved device memory passed %.0f%% of the GPU: releasing cached blocks",
               options.cache_release_fraction * 100);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#else
  (void)options, (void)context, (void)log;
#endif
}

absl::StatusOr<std::unique_ptr<StepProfiler>> MakeStepProfiler(const RunContext& context) {
  void* stream = nullptr;
#ifdef STOKER_WITH_CUDA
  if (context.use_cuda) stream = at::cuda::getCurrentCUDAStream(context.cuda_device).stream();
#endif
  return StepProfiler::Create(context.use_cuda, stream, context.cuda_device);
}

void SetDeviceProfilerRange(const RunContext& context, bool on) {
#ifdef STOKER_WITH_CUDA
  if (!context.use_cuda) return;
  const absl::Status status = on ? CudaStatus(cudaProfilerStart(), "cudaProfilerStart")
                                 : CudaStatus(cudaProfilerStop(), "cudaProfilerStop");
  if (!status.ok())
    LogWarning("the profiled steps are not marked for a CUDA profiler: %s", status.message());
#else
  (void)context, (void)on;
#endif
}

std::string MemoryText(const RunContext& context) {
#ifdef STOKER_WITH_CUDA
  if (context.use_cuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(context.cuda_device);
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const double gib = 1024.0 * 1024 * 1024;
    return absl::StrFormat("GPU %.1f GiB (peak %.1f)",
                           stats.allocated_bytes[aggregate].current / gib,
                           stats.allocated_bytes[aggregate].peak / gib);
  }
#endif
  (void)context;
  const double rss = ResidentSetGiB();
  return rss >= 0 ? absl::StrFormat("RSS %.2f GiB", rss) : "";
}

}  // namespace stoker::trainer
