// TraceRecorder: one process's events in the Chrome trace-event format (the JSON that
// Perfetto and chrome://tracing open), recorded for a window of a run (--trace=DIR,
// --trace_steps=A:B) and written whole when the window ends. Times are microseconds on the
// process's CLOCK_MONOTONIC (TraceNowMicros); the file says how that clock relates to rank
// 0's (Note [One clock for the job]), and `launcher trace merge` puts every file of a job
// on rank 0's clock. Outside the window a recorder costs one branch per call site:
// `recording()` is a relaxed atomic load, and TraceSpan checks it once.
#ifndef STOKER_COMMON_TRACE_EVENTS_H_
#define STOKER_COMMON_TRACE_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"

namespace stoker {

// Note [One clock for the job]: every process stamps its events with CLOCK_MONOTONIC, which
// all processes of one kernel share. Each trainer rank measures its clock's offset against
// rank 0's by MPI ping-pong (the round trip of least time among several, the offset its
// midpoint, the error half that round trip) when its window starts and when it ends, and
// writes both into its file. A data service measures nothing: it runs on the kernel of its
// node's ranks, so its stamps are already on their clock, and the merge gives it the offset
// of its node's rank with the smallest error. (Containers with their own time namespace
// would break this; Stoker's data service runs beside its ranks, in their namespace.)

// Microseconds on CLOCK_MONOTONIC.
int64_t TraceNowMicros();

// This machine's host name, as the traces name processes by it.
std::string TraceHostName();

// The id of the flow from the data service that publishes batch (epoch, step) of rank
// `rank`'s ring to the rank that takes it: the same on both sides, unique in a job while
// rank < 2^19, epoch < 2^13 and step < 2^20, and below 2^52 (trace viewers read ids as
// doubles). Other flows use ids from 2^52 on.
uint64_t RingBatchFlowId(int rank, int64_t epoch, int64_t step);

// The steps a run traces: [first, end), 0-based optimizer steps of the run.
struct TraceSteps {
  int64_t first = 0;
  int64_t end = 0;
  bool Contains(int64_t step) const { return step >= first && step < end; }
};

// Parses "A:B" (0 <= A < B). InvalidArgument naming --trace_steps otherwise.
absl::StatusOr<TraceSteps> ParseTraceSteps(absl::string_view text);

// The "args" of one event: a JSON object built in order. Strings are escaped.
class TraceArgs {
 public:
  TraceArgs& Add(absl::string_view key, absl::string_view value);
  TraceArgs& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }
  TraceArgs& Add(absl::string_view key, const std::string& value) {
    return Add(key, absl::string_view(value));
  }
  TraceArgs& Add(absl::string_view key, int64_t value);
  TraceArgs& Add(absl::string_view key, int value) { return Add(key, static_cast<int64_t>(value)); }
  TraceArgs& Add(absl::string_view key, double value);
  // A value that is already JSON (an object or array).
  TraceArgs& AddJson(absl::string_view key, absl::string_view json);
  bool empty() const { return json_.empty(); }
  std::string Json() const;  // "{...}"

 private:
  void Key(absl::string_view key);
  std::string json_;
};

// JSON string literal of `text` (quotes included).
std::string TraceJsonString(absl::string_view text);

// Opens `path` for a recorder's WriteThrough now, creating its directory and the file
// (empty, owner read and write) or emptying it: for a process that confines the creation
// of files later (the data service's sandbox, Note [Trace file before the sandbox]).
// Errors name the path.
absl::StatusOr<UniqueFd> OpenTraceFile(const std::string& path);

// Note [Trace file before the sandbox]: a recorder normally writes a temporary file and
// renames it over its path, so that a reader finds the old file or the new one. The data
// service's sandbox refuses both the new file and the rename, so a traced service opens
// its file before the sandbox goes on (OpenTraceFile) and the recorder rewrites that file
// in place. A reader may then find it empty (before the window's end) or cut short (the
// process killed while it wrote); `launcher trace merge` names such a file and keeps what
// it holds.

// Thread-safe. Events recorded while not recording are dropped.
//
//   TraceRecorder trace(dir + "/rank1.json", /*pid=*/1, "rank 1 on gpu07");
//   trace.Start();
//   { TraceSpan span(&trace, kTrainingThread, "forward", "compute"); ... }
//   RETURN_IF_ERROR(trace.Finish());
class TraceRecorder {
 public:
  // `pid` is the process's number in the merged view (unique in the job); `process_name`
  // its name there.
  TraceRecorder(std::string path, int pid, std::string process_name);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  const std::string& path() const { return path_; }
  int pid() const { return pid_; }

  // Starts recording (again).
  void Start();
  // Stops recording; the events stay until Finish.
  void Pause();
  // Writes the file (atomically, or in place after WriteThrough) with the events so far
  // and the metadata, and goes on recording; later calls write it again with what was
  // added since.
  absl::Status Write();
  // Writes through `file` (OpenTraceFile's, of path()) from now on, in place rather than by
  // a rename (Note [Trace file before the sandbox]).
  void WriteThrough(UniqueFd file);
  // Stops recording, then Write().
  absl::Status Finish();

  // The name of thread `tid` in the view.
  void NameThread(int tid, absl::string_view name);
  // A top-level field of the file's "stoker" object (`json` is a JSON value).
  void SetMetadata(absl::string_view key, std::string json);

  // A complete event ("X") from `start_us` to `end_us`.
  void Complete(int tid, absl::string_view name, absl::string_view category, int64_t start_us,
                int64_t end_us, const TraceArgs& args = TraceArgs());
  // An instant event ("i", thread scope).
  void Instant(int tid, absl::string_view name, absl::string_view category, int64_t ts_us,
               const TraceArgs& args = TraceArgs());
  // One end of a flow arrow ("s" at the sender, "f" at the receiver, paired by `id`), bound
  // to the slice that encloses `ts_us` on thread `tid` (record that slice too).
  void FlowStart(int tid, absl::string_view name, uint64_t id, int64_t ts_us);
  void FlowEnd(int tid, absl::string_view name, uint64_t id, int64_t ts_us);
  // A counter track ("C") of this process.
  void Counter(absl::string_view name, int64_t ts_us, double value);

  // The number of events recorded so far (metadata excluded).
  size_t event_count() const;

 private:
  void Add(std::string event);

  const std::string path_;
  const int pid_;
  const std::string process_name_;
  std::atomic<bool> recording_{false};
  mutable absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, std::string>> thread_names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> metadata_ ABSL_GUARDED_BY(mu_);
  UniqueFd file_ ABSL_GUARDED_BY(mu_);  // WriteThrough's; invalid: atomic writes
};

// Records a complete event from construction to destruction when `recorder` is recording
// at construction; otherwise nothing (one branch). `recorder` may be null.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* recorder, int tid, const char* name, const char* category)
      : recorder_(recorder != nullptr && recorder->recording() ? recorder : nullptr),
        tid_(tid),
        name_(name),
        category_(category),
        start_(recorder_ != nullptr ? TraceNowMicros() : 0) {}
  ~TraceSpan() {
    if (recorder_ != nullptr)
      recorder_->Complete(tid_, name_, category_, start_, TraceNowMicros(), args_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  bool active() const { return recorder_ != nullptr; }
  // Arguments written with the event (only built when active()).
  TraceArgs& args() { return args_; }

 private:
  TraceRecorder* const recorder_;
  const int tid_;
  const char* const name_;
  const char* const category_;
  const int64_t start_;
  TraceArgs args_;
};

}  // namespace stoker

#endif  // STOKER_COMMON_TRACE_EVENTS_H_
