#include "trainer/comm/device_timeline.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "common/cuda_stream.h"
#endif

namespace stoker::trainer {

#ifdef STOKER_WITH_CUDA

namespace {

// Tries for a blocking anchor after a wait: the stream is idle then, unless another
// thread enqueued meanwhile.
constexpr int kAnchorAttempts = 8;
// How long an anchor's event is polled: a free anchor at a step start must cost the
// training thread little; a blocking one follows a wait for an idle stream.
constexpr int64_t kFreeAnchorPollUs = 20;
constexpr int64_t kBlockingAnchorPollUs = 2000;

struct AnchorPoint {
  CudaEvent event;
  int64_t host_us = 0;
  int64_t error_us = 0;
};

struct Interval {
  int tid = 0;
  std::string name;
  TraceArgs args;
  std::shared_ptr<const AnchorPoint> anchor;
  bool done_recorded = false;
  bool timed = true;  // false: its done event could not be recorded
};

// An anchor on `stream`, or null when its event had not passed within `poll_us` of the
// record (the GPU takes a few microseconds to reach an event even on an idle stream). The
// event passed between the record and the last query, so their midpoint is its host time
// within half that span, whatever the stream was doing.
absl::StatusOr<std::shared_ptr<const AnchorPoint>> FreeAnchor(cudaStream_t stream,
                                                              int64_t poll_us) {
  ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(cudaEventDefault));
  const int64_t before = TraceNowMicros();
  RETURN_IF_ERROR(event.Record(stream));
  bool passed = false;
  int64_t after = before;
  do {
    ASSIGN_OR_RETURN(passed, event.Query());
    after = TraceNowMicros();
  } while (!passed && after - before < poll_us);
  if (!passed) return std::shared_ptr<const AnchorPoint>();
  auto anchor = std::make_shared<AnchorPoint>();
  anchor->event = std::move(event);
  anchor->host_us = (before + after) / 2;
  anchor->error_us = (after - before + 1) / 2;
  return std::shared_ptr<const AnchorPoint>(std::move(anchor));
}

}  // namespace

struct DeviceTimeline::Impl {
  TraceRecorder* recorder = nullptr;
  mutable absl::Mutex mu;
  struct Slot {
    CudaEvent started;
    CudaEvent done;
  };
  std::vector<Slot> slots ABSL_GUARDED_BY(mu);
  std::vector<int> free_slots ABSL_GUARDED_BY(mu);
  std::vector<Interval> intervals ABSL_GUARDED_BY(mu);  // by slot
  std::deque<int> order ABSL_GUARDED_BY(mu);            // slots in flight, oldest first
  std::shared_ptr<const AnchorPoint> anchor ABSL_GUARDED_BY(mu);
  cudaStream_t home ABSL_GUARDED_BY(mu) = nullptr;
  // The next interval's label.
  int next_tid ABSL_GUARDED_BY(mu) = 0;
  std::string next_name ABSL_GUARDED_BY(mu) = "device work";
  TraceArgs next_args ABSL_GUARDED_BY(mu);
  std::map<int, int64_t> last_end_us ABSL_GUARDED_BY(mu);  // by trace thread
  int64_t dropped ABSL_GUARDED_BY(mu) = 0;
  int64_t written ABSL_GUARDED_BY(mu) = 0;
  int64_t anchor_error_us ABSL_GUARDED_BY(mu) = 0;
};

absl::StatusOr<std::unique_ptr<DeviceTimeline>> DeviceTimeline::Create(TraceRecorder* recorder,
                                                                       int pool_intervals) {
  if (recorder == nullptr || pool_intervals < 1) {
    return absl::InvalidArgumentError("device timeline: a recorder and a pool are needed");
  }
  auto impl = std::make_unique<Impl>();
  impl->recorder = recorder;
  absl::MutexLock lock(&impl->mu);
  impl->slots.resize(pool_intervals);
  impl->intervals.resize(pool_intervals);
  for (int i = pool_intervals - 1; i >= 0; --i) {
    ASSIGN_OR_RETURN(impl->slots[i].started, CudaEvent::Create(cudaEventDefault));
    ASSIGN_OR_RETURN(impl->slots[i].done, CudaEvent::Create(cudaEventDefault));
    impl->free_slots.push_back(i);
  }
  return std::unique_ptr<DeviceTimeline>(new DeviceTimeline(std::move(impl)));
}

absl::Status DeviceTimeline::Anchor(CUstream_st* stream) {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->home = stream;
  }
  RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  for (int attempt = 0; attempt < kAnchorAttempts; ++attempt) {
    ASSIGN_OR_RETURN(std::shared_ptr<const AnchorPoint> anchor,
                     FreeAnchor(stream, kBlockingAnchorPollUs));
    if (anchor != nullptr) {
      absl::MutexLock lock(&impl_->mu);
      impl_->anchor = std::move(anchor);
      return absl::OkStatus();
    }
    RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  }
  return absl::InternalError(absl::StrCat("device timeline: the stream was never idle in ",
                                          kAnchorAttempts, " waits for it"));
}

absl::StatusOr<bool> DeviceTimeline::TryAnchor(CUstream_st* stream) {
  ASSIGN_OR_RETURN(std::shared_ptr<const AnchorPoint> anchor,
                   FreeAnchor(stream, kFreeAnchorPollUs));
  if (anchor == nullptr) return false;
  absl::MutexLock lock(&impl_->mu);
  impl_->anchor = std::move(anchor);
  return true;
}

void DeviceTimeline::Label(int tid, std::string name, TraceArgs args) {
  absl::MutexLock lock(&impl_->mu);
  impl_->next_tid = tid;
  impl_->next_name = std::move(name);
  impl_->next_args = std::move(args);
}

int DeviceTimeline::Started(CUstream_st* stream) {
  if (!impl_->recorder->recording()) return -1;
  if (stream == nullptr) {
    absl::MutexLock lock(&impl_->mu);
    stream = impl_->home;
    if (stream == nullptr) return -1;
  }
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone) {
    return -1;  // Note [Device intervals on the host's clock]
  }
  absl::MutexLock lock(&impl_->mu);
  if (impl_->anchor == nullptr) return -1;
  if (impl_->free_slots.empty()) {
    ++impl_->dropped;
    return -1;
  }
  const int slot = impl_->free_slots.back();
  if (cudaEventRecord(impl_->slots[slot].started.get(), stream) != cudaSuccess) return -1;
  impl_->free_slots.pop_back();
  Interval& interval = impl_->intervals[slot];
  interval.tid = impl_->next_tid;
  interval.name = std::exchange(impl_->next_name, "device work");
  interval.args = std::exchange(impl_->next_args, TraceArgs());
  interval.anchor = impl_->anchor;
  interval.done_recorded = false;
  interval.timed = true;
  impl_->order.push_back(slot);
  return slot;
}

void DeviceTimeline::Done(int ticket, CUstream_st* stream) {
  if (ticket < 0) return;
  absl::MutexLock lock(&impl_->mu);
  if (stream == nullptr) stream = impl_->home;
  Interval& interval = impl_->intervals[ticket];
  if (cudaEventRecord(impl_->slots[ticket].done.get(), stream) != cudaSuccess) {
    interval.timed = false;  // its slot is freed, the interval not written
    ++impl_->dropped;
  }
  interval.done_recorded = true;
}

absl::Status DeviceTimeline::WriteFinished(bool wait) {
  absl::MutexLock lock(&impl_->mu);
  while (!impl_->order.empty()) {
    const int slot = impl_->order.front();
    Interval& interval = impl_->intervals[slot];
    if (!interval.done_recorded) {
      if (wait) {
        return absl::FailedPreconditionError(
            absl::StrCat("device timeline: ", interval.name, " was started and never done"));
      }
      break;
    }
    Impl::Slot& events = impl_->slots[slot];
    if (!interval.timed) {
      interval = Interval();
      impl_->order.pop_front();
      impl_->free_slots.push_back(slot);
      continue;
    }
    if (wait) RETURN_IF_ERROR(events.done.Synchronize());
    ASSIGN_OR_RETURN(bool passed, events.done.Query());
    if (!passed) break;
    ASSIGN_OR_RETURN(float started_ms, events.started.ElapsedMs(interval.anchor->event));
    ASSIGN_OR_RETURN(float done_ms, events.done.ElapsedMs(interval.anchor->event));
    int64_t start_us = interval.anchor->host_us + static_cast<int64_t>(started_ms * 1e3);
    int64_t end_us = interval.anchor->host_us + static_cast<int64_t>(done_ms * 1e3);
    // Work on one stream does not overlap; anchors of different steps may disagree by
    // their error, which must not make it look as if it did.
    int64_t& last_end = impl_->last_end_us[interval.tid];
    start_us = std::max(start_us, last_end);
    end_us = std::max(end_us, start_us);
    last_end = end_us;
    impl_->anchor_error_us = std::max(impl_->anchor_error_us, interval.anchor->error_us);
    interval.args.Add("anchor_error_us", interval.anchor->error_us);
    impl_->recorder->Complete(interval.tid, interval.name, "gpu", start_us, end_us, interval.args);
    ++impl_->written;
    interval = Interval();
    impl_->order.pop_front();
    impl_->free_slots.push_back(slot);
  }
  return absl::OkStatus();
}

int64_t DeviceTimeline::dropped() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->dropped;
}

int64_t DeviceTimeline::written() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->written;
}

int64_t DeviceTimeline::anchor_error_us() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->anchor_error_us;
}

#else  // !STOKER_WITH_CUDA

struct DeviceTimeline::Impl {};

absl::StatusOr<std::unique_ptr<DeviceTimeline>> DeviceTimeline::Create(TraceRecorder*, int) {
  return absl::UnimplementedError("device timeline: built without CUDA");
}
absl::Status DeviceTimeline::Anchor(CUstream_st*) { return absl::OkStatus(); }
absl::StatusOr<bool> DeviceTimeline::TryAnchor(CUstream_st*) { return false; }
void DeviceTimeline::Label(int, std::string, TraceArgs) {}
int DeviceTimeline::Started(CUstream_st*) { return -1; }
void DeviceTimeline::Done(int, CUstream_st*) {}
absl::Status DeviceTimeline::WriteFinished(bool) { return absl::OkStatus(); }
int64_t DeviceTimeline::dropped() const { return 0; }
int64_t DeviceTimeline::written() const { return 0; }
int64_t DeviceTimeline::anchor_error_us() const { return 0; }

#endif  // STOKER_WITH_CUDA

DeviceTimeline::DeviceTimeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceTimeline::~DeviceTimeline() = default;

absl::Status DeviceTimeline::Collect() { return WriteFinished(/*wait=*/false); }
absl::Status DeviceTimeline::Drain() { return WriteFinished(/*wait=*/true); }

}  // namespace stoker::trainer
