#include "trainer/cuda_graph.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace stoker::trainer {

#ifdef STOKER_WITH_CUDA

namespace {

// A graph whose capture can be abandoned: capture_begin puts the random generators it
// draws from into capture mode, and only a successful capture_end takes them out again; an
// abandoned capture must, or their next uncaptured draw fails.
struct AbandonableGraph : at::cuda::CUDAGraph {
  void Abandon() {
    // What CUDAGeneratorState::capture_epilogue does, which libtorch does not export.
    for (auto& [state, increment] : captured_generator_states_) state->capturing_ = false;
  }
};

}  // namespace

struct CudaGraph::Impl {
  AbandonableGraph graph;
};

absl::StatusOr<GraphPool> GraphPool::Create() {
  return TorchCall("CUDA graph: making a memory pool", [&] {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    return GraphPool(at::cuda::graph_pool_handle());
  });
}

absl::Status UseCapturableStream() {
  return TorchCall("CUDA graph: a stream to capture on", [&] {
    c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false));
  });
}

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::Capture(
    const GraphPool& pool, const std::vector<at::Generator>& generators,
    absl::FunctionRef<absl::Status()> work) {
  auto impl = std::make_unique<Impl>();
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  if (stream == c10::cuda::getDefaultCUDAStream(stream.device_index())) {
    return absl::FailedPreconditionError(
        "capturing a CUDA graph: the current stream is the device's default stream, which "
        "cannot be captured (UseCapturableStream)");
  }
  RETURN_IF_ERROR(TorchCall("CUDA graph: registering the random generators", [&] {
    for (const at::Generator& generator : generators)
      impl->graph.register_generator_state(generator);
  }));
  // Thread-local mode: the data feeder's and the watchdog's threads keep using CUDA while
  // the training thread captures; autograd's threads enqueue onto the capturing stream.
  absl::Status captured = TorchCall("CUDA graph: beginning the capture", [&] {
    impl->graph.capture_begin(pool.id(), cudaStreamCaptureModeThreadLocal);
  });
  if (!captured.ok()) {
    impl->graph.Abandon();
    return captured;
  }
  captured = TorchCall("the captured work", [&] { return work(); });
  if (captured.ok()) {
    captured = TorchCall("CUDA graph: ending the capture", [&] { impl->graph.capture_end(); });
  } else {
    // Leave nothing capturing: end the stream's capture (the partial graph is dropped),
    // route the device and host allocators back to their ordinary pools, and take the
    // generators out of capture mode.
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream.stream(), &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();  // the invalidated capture's error is reported through `captured`
    c10::cuda::CUDACachingAllocator::endAllocateToPool(stream.device_index(), pool.id());
    at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool.id());
    impl->graph.Abandon();
  }
  if (!captured.ok()) {
    return absl::Status(captured.code(),
                        absl::StrCat("capturing a CUDA graph: ", captured.message()));
  }
  return std::unique_ptr<CudaGraph>(new CudaGraph(std::move(impl)));
}

absl::Status CudaGraph::Replay() {
  return TorchCall("CUDA graph: replay", [&] { impl_->graph.replay(); });
}

#else  // !STOKER_WITH_CUDA

struct CudaGraph::Impl {};

absl::Status UseCapturableStream() {
  return absl::UnimplementedError("CUDA graphs need a build with CUDA");
}

absl::StatusOr<GraphPool> GraphPool::Create() {
  return absl::UnimplementedError("CUDA graphs need a build with CUDA");
}

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::Capture(const GraphPool&,
                                                              const std::vector<at::Generator>&,
                                                              absl::FunctionRef<absl::Status()>) {
  return absl::UnimplementedError("CUDA graphs need a build with CUDA");
}

absl::Status CudaGraph::Replay() {
  return absl::UnimplementedError("CUDA graphs need a build with CUDA");
}

#endif  // STOKER_WITH_CUDA

CudaGraph::CudaGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaGraph::~CudaGraph() = default;

}  // namespace stoker::trainer
