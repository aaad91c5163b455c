// CudaGraph: device work captured once as a CUDA graph and replayed with one launch. The
// training step (trainer/train_step.h) captures its forward and backward and its optimizer
// step this way, so that the host launches a few graphs per step instead of thousands of
// kernels.
//
//   ASSIGN_OR_RETURN(GraphPool pool, GraphPool::Create());
//   ASSIGN_OR_RETURN(std::unique_ptr<CudaGraph> graph,
//                    CudaGraph::Capture(pool, generators, [&] { return EnqueueWork(); }));
//   RETURN_IF_ERROR(graph->Replay());  // as often as needed
//
// What a graph reads and writes is fixed at capture: the addresses of every tensor the work
// used. Inputs are copied into tensors allocated before the capture; results the caller
// keeps are copied, inside the work, into tensors allocated before the capture. Tensors the
// work allocates come from the pool and are the graph's scratch: their memory is reused by
// the other graphs of the pool, so no such tensor may be read after another graph of the
// pool ran. Graphs of one pool must be replayed one at a time, on one stream.
//
// Built without CUDA, UseCapturableStream, GraphPool::Create and Capture return
// Unimplemented. Owned by the
// training thread.
#ifndef STOKER_TRAINER_CUDA_GRAPH_H_
#define STOKER_TRAINER_CUDA_GRAPH_H_

#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::trainer {

// Makes a stream of the current device, not its default stream, the calling thread's
// current stream for good. Graphs are captured on the current stream, and autograd runs
// each gradient accumulator on the stream that was current when the accumulator was made
// (gradient buckets keep theirs for the whole run), so a thread that will capture calls
// this before it makes its model and buckets, and then runs all its work there.
absl::Status UseCapturableStream();

// The device memory that graphs captured with it share (a private pool of the caching
// allocator).
class GraphPool {
 public:
  // Waits for the current device and first gives the caching allocator's free blocks back
  // to it, so that the graphs' memory does not come on top of what uncaptured work cached.
  static absl::StatusOr<GraphPool> Create();
  std::pair<uint64_t, uint64_t> id() const { return id_; }

 private:
  explicit GraphPool(std::pair<uint64_t, uint64_t> id) : id_(id) {}
  std::pair<uint64_t, uint64_t> id_;
};

class CudaGraph {
 public:
  // Runs `work` once on the host with the device work it enqueues on the current stream
  // (UseCapturableStream) recorded, not run; kernels that other threads enqueue on that
  // stream meanwhile (autograd's backward) are recorded too. `generators` are the random
  // generators, besides the device's default one, whose numbers the work draws: each
  // replay draws from their current seed and offset.
  //
  // Fails, with the capture discarded and nothing left capturing, when `work` fails or does
  // something a graph cannot hold (a host sync on the captured stream, a host read of a
  // device value): the message says which; the work then ran on the host only, and its
  // device side did not run at all.
  static absl::StatusOr<std::unique_ptr<CudaGraph>> Capture(
      const GraphPool& pool, const std::vector<at::Generator>& generators,
      absl::FunctionRef<absl::Status()> work);

  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Launches the captured work on the current stream (no host sync).
  absl::Status Replay();

 private:
  struct Impl;
  explicit CudaGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CUDA_GRAPH_H_
