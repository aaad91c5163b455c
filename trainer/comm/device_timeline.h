// DeviceTimeline: intervals of device work (each gradient bucket's reduction on the
// communicator's stream, a replayed CUDA graph on the training stream) timed by CUDA events
// recorded around the work, read back at step boundaries without waiting for the device,
// and written into a trace on the host's clock (Note [Device intervals on the host's
// clock]). Built without CUDA, Create returns Unimplemented.
#ifndef STOKER_TRAINER_COMM_DEVICE_TIMELINE_H_
#define STOKER_TRAINER_COMM_DEVICE_TIMELINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/trace_events.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace stoker::trainer {

// Note [Device intervals on the host's clock]: the host cannot read the GPU's clock, only
// the time between two timing events (cudaEventElapsedTime). An anchor is a pair: an event
// recorded on a stream and the host time (TraceNowMicros) at which it passed. A blocking
// anchor (Anchor) waits for the stream, records the event and polls it; a free one
// (TryAnchor, at each step start) records it and polls it for a few microseconds, and
// counts only when it has passed by then (it passed between the record and the last
// query: their midpoint is its host time, within half that span). An interval's ends are its
// anchor's host time plus their elapsed time after the anchor's event. The events come from a fixed
// pool; an interval whose done event has not passed at a step boundary stays in flight until a
// later one, and when the pool is empty an interval is not recorded but counted (dropped()). Work
// enqueued while its stream is being captured into a CUDA graph is not timed: a graph records an
// event at capture, and each replay would record that same event again before the previous replay's
// was read (Note [Timing a replayed graph]).
//
// Note [Timing a replayed graph]: a replayed step's reductions are nodes of its graph, and
// the events around them would be the graph's own (cudaEventRecordWithFlags with
// cudaEventRecordExternal), the same events in every replay; reading them at the next
// step boundary would need the host to wait for the replay before launching the next one,
// which is the stall tracing must not add. So a replayed micro-batch is timed as one
// interval, by events recorded on the training stream before and after its launch ("GPU:
// CUDA graph replay"), and its buckets' reductions appear only in uncaptured steps
// (--nocuda_graphs, or the steps before the capture).

// Thread-safe. The thread that enqueues the work calls Label, Started and Done; the
// training thread calls Anchor, TryAnchor, Collect and Drain.
//
//   timeline->Label(kGpuCommTraceThread, "bucket 3 all-reduce", TraceArgs().Add("bucket", 3));
//   const int ticket = timeline->Started(stream);
//   ... enqueue the work on stream ...
//   timeline->Done(ticket, stream);
//   ... at the next step boundary: RETURN_IF_ERROR(timeline->Collect());
class DeviceTimeline {
 public:
  // Intervals the pool holds in flight at once.
  static constexpr int kDefaultPoolIntervals = 256;

  // Writes into `recorder` (borrowed), on the device that is current now.
  static absl::StatusOr<std::unique_ptr<DeviceTimeline>> Create(
      TraceRecorder* recorder, int pool_intervals = kDefaultPoolIntervals);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // A blocking anchor on `stream` (Note [Device intervals on the host's clock]), which
  // becomes the home stream: that of Started and Done given none.
  absl::Status Anchor(CUstream_st* stream);
  // A free anchor on `stream`: replaces the current one only if the stream was idle.
  // Returns whether it did.
  absl::StatusOr<bool> TryAnchor(CUstream_st* stream);

  // The trace thread, name and arguments of the next interval Started (else "device work"
  // on the last thread labelled).
  void Label(int tid, std::string name, TraceArgs args = TraceArgs());
  // Records the start of an interval on `stream` (null: the home stream) and returns its
  // ticket; -1 (and Done
  // does nothing) when the recorder is not recording, no anchor was taken, the stream is
  // being captured, or the pool is empty (counted in dropped()).
  int Started(CUstream_st* stream = nullptr);
  // Records the end of interval `ticket` on `stream` (null: the home stream), after the
  // work.
  void Done(int ticket, CUstream_st* stream = nullptr);

  // Writes the intervals whose work has finished into the recorder, oldest first, without
  // waiting for the device; the others stay in flight.
  absl::Status Collect();
  // Waits for the intervals in flight, then writes them (the window's end).
  absl::Status Drain();

  // Intervals not recorded because the pool was empty.
  int64_t dropped() const;
  // Intervals written so far.
  int64_t written() const;
  // The largest uncertainty of an anchor used so far, microseconds.
  int64_t anchor_error_us() const;

 private:
  struct Impl;
  explicit DeviceTimeline(std::unique_ptr<Impl> impl);
  absl::Status WriteFinished(bool wait);

  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_DEVICE_TIMELINE_H_
