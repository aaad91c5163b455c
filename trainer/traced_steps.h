// TracedSteps: the run's trace window (--trace=DIR, --trace_steps=A:B). While the window's
// steps run, the rank records them in Chrome's trace-event format (common/trace_events.h):
// the step, its data wait and copy, the stop vote, forward, backward, each gradient
// bucket's reduction, the optimizer or the CUDA graphs replayed, validation and checkpoints;
// on a GPU also the compute stream's intervals and each bucket's reduction on the
// communicator's stream, from CUDA events read at the step boundaries (DeviceTimeline). At the
// window's first and last step every rank measures its clock against rank 0's
// (trainer/comm/clock_sync.h). After each traced step the ranks' times go to rank 0 (one small
// allreduce), which judges the step (trainer/report/step_verdict.h) and reports the verdict. At the
// window's end each rank writes DIR/rank<r>.json. Outside the window every call is one branch.
// Owned by the training thread; the calls that gather are collectives, made at the same steps on
// every rank.
#ifndef STOKER_TRAINER_TRACED_STEPS_H_
#define STOKER_TRAINER_TRACED_STEPS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/trace_events.h"
#include "trainer/comm/clock_sync.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/device_timeline.h"
#include "trainer/options.h"
#include "trainer/report/run_reporter.h"
#include "trainer/report/step_verdict.h"
#include "trainer/run_context.h"

namespace stoker::trainer {

// The threads of a rank's trace.
inline constexpr int kTrainingTraceThread = 1;
inline constexpr int kGpuTraceThread = 2;      // the compute stream's intervals (CUDA events)
inline constexpr int kGpuCommTraceThread = 3;  // the communicator's stream (CUDA events)

// The data service's window for a trainer window of optimizer steps: its rings count
// batches, `accumulate` to a step ("A*K:B*K").
std::string DataServiceTraceSteps(const TraceSteps& steps, int accumulate);

// The window --trace_steps names, or the default one after the warm-up.
absl::StatusOr<TraceSteps> TraceWindowOf(const TrainerOptions& options);

class TracedSteps {
 public:
  // Null without --trace. Creates DIR.
  static absl::StatusOr<std::unique_ptr<TracedSteps>> Create(const TrainerOptions& options,
                                                             const RunContext& context,
                                                             Communicator& host);
  ~TracedSteps();

  // What the step, the buckets and the loop record into (recording only in the window).
  TraceRecorder* recorder() { return &recorder_; }
  // On a GPU, what times the buckets' reductions on the communicator's stream and the
  // replayed graphs on the training stream (trainer/comm/device_timeline.h); else null.
  DeviceTimeline* device_timeline() { return timeline_.get(); }

  // Before step `step` of the run (0-based): at the window's first step, gathers the ranks'
  // hosts and measures the clocks (collectives), then records until the window ends.
  absl::Status StepStarting(int64_t step);
  // The parts of a traced step as the loop measured them (TraceNowMicros); no-ops outside
  // the window. `data_wait` is the feeder's wait for the data service within [start, end).
  // The batch is (epoch, batch) of the rank's ring.
  void BatchArrived(int64_t epoch, int64_t batch, int64_t start_us, int64_t end_us,
                    absl::Duration data_wait);
  void Voted(int64_t start_us, int64_t end_us);
  // Forward, backward and the optimizer; `comm_seconds` of it was spent inside gradient
  // reductions (the CPU's, in backward's hooks).
  void Computed(int64_t start_us, int64_t end_us, double comm_seconds);
  // After step `step`: the ranks' times go to rank 0, which judges the step into
  // `reporter` (a collective on the host communicator). At the window's last step, measures
  // the clocks again and writes the trace.
  absl::Status StepEnded(int64_t step, RunReporter& reporter);
  // At the end of the run: if the window was cut short, measures the clocks and writes
  // what was recorded (a collective: every rank calls it).
  absl::Status Finish();

 private:
  struct DeviceIntervals;  // the GPU's (CUDA events), defined where CUDA is known
  TracedSteps(const RunContext& context, Communicator& host, TraceSteps steps, std::string path,
              std::string process_name);
  absl::Status MeasureClock(const char* when);
  absl::Status WriteTrace();
  absl::Status RecordDevicePoint(const char* name);

  const RunContext& context_;
  Communicator& host_;
  const TraceSteps steps_;
  TraceRecorder recorder_;
  std::string host_name_;
  std::vector<RankPlace> places_;  // every rank's; filled at the window's start
  std::vector<std::string> clock_json_;
  bool started_ = false;
  bool written_ = false;
  bool in_step_ = false;

  // The traced step in progress.
  int64_t step_start_us_ = 0;
  RankStepTimes times_;
  std::vector<double> step_ms_;  // the slowest rank's, of each traced step (rank 0)
  std::unique_ptr<DeviceIntervals> device_;
  std::unique_ptr<DeviceTimeline> timeline_;  // on a GPU
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_TRACED_STEPS_H_
