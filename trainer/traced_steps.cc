#include "trainer/traced_steps.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "common/cuda_stream.h"
#endif

namespace stoker::trainer {
namespace {

// The ping-pong rounds of one clock measurement (Note [One clock for the job]).
constexpr int kClockRounds = 16;

// Host names longer than this are cut in the verdicts (a multiple of 8).
constexpr int kHostNameBytes = 64;

// What each rank sends rank 0 per traced step.
constexpr int kTimesPerRank = 5;

}  // namespace

#ifdef STOKER_WITH_CUDA
// Note [GPU intervals]: points recorded as CUDA events on the training stream (the step's
// start, its batch in place, its end), placed on the host's clock at the window's end: a
// reference event recorded at the window's start and waited for gives the host time of
// the stream's position then, and each point is that time plus the event's elapsed time
// after the reference.
struct TracedSteps::DeviceIntervals {
  cudaStream_t stream = nullptr;
  CudaEvent reference;
  int64_t reference_us = 0;
  struct Point {
    std::string name;
    int64_t step = 0;
    CudaEvent event;
  };
  std::vector<Point> points;
};
#else
struct TracedSteps::DeviceIntervals {};
#endif

std::string DataServiceTraceSteps(const TraceSteps& steps, int accumulate) {
  return absl::StrCat(steps.first * accumulate, ":", steps.end * accumulate);
}

absl::StatusOr<TraceSteps> TraceWindowOf(const TrainerOptions& options) {
  if (!options.report.trace_steps.empty()) return ParseTraceSteps(options.report.trace_steps);
  const int64_t first = options.benchmark.warmup_steps;
  return TraceSteps{first, first + kDefaultTraceSteps};
}

absl::StatusOr<std::unique_ptr<TracedSteps>> TracedSteps::Create(const TrainerOptions& options,
                                                                 const RunContext& context,
                                                                 Communicator& host) {
  if (options.report.trace_dir.empty()) return nullptr;
  ASSIGN_OR_RETURN(TraceSteps steps, TraceWindowOf(options));
  RETURN_IF_ERROR(MakeDirectories(options.report.trace_dir));
  const std::string path =
      absl::StrCat(options.report.trace_dir, "/rank", context.rank.rank, ".json");
  const std::string host_name = TraceHostName();
  std::unique_ptr<TracedSteps> traced(
      new TracedSteps(context, host, steps, path,
                      absl::StrCat("rank ", context.rank.rank, " on ", host_name, " (node ",
                                   context.rank.node_index, ")")));
  traced->host_name_ = host_name;
  if (context.use_cuda) {
    ASSIGN_OR_RETURN(traced->timeline_, DeviceTimeline::Create(&traced->recorder_));
  }
  return traced;
}

TracedSteps::TracedSteps(const RunContext& context, Communicator& host, TraceSteps steps,
                         std::string path, std::string process_name)
    : context_(context),
      host_(host),
      steps_(steps),
      recorder_(std::move(path), context.rank.rank, std::move(process_name)),
      device_(std::make_unique<DeviceIntervals>()) {
  recorder_.NameThread(kTrainingTraceThread, "training thread");
  recorder_.NameThread(kClockTraceThread, "clock pings");
  if (context.use_cuda) {
    recorder_.NameThread(kGpuTraceThread, "GPU: training stream");
    recorder_.NameThread(kGpuCommTraceThread, "GPU: communication stream");
  }
}

TracedSteps::~TracedSteps() = default;

absl::Status TracedSteps::MeasureClock(const char* when) {
  if (context_.world == MPI_COMM_NULL) return absl::OkStatus();
  ASSIGN_OR_RETURN(ClockOffset offset,
                   MeasureClockOffset(context_.world, kClockRounds, &recorder_));
  clock_json_.push_back(absl::StrCat("{\"at\":\"", when, "\",", offset.Json().substr(1)));
  return absl::OkStatus();
}

absl::Status TracedSteps::RecordDevicePoint(const char* name) {
#ifdef STOKER_WITH_CUDA
  if (!context_.use_cuda) return absl::OkStatus();
  ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(cudaEventDefault));
  RETURN_IF_ERROR(event.Record(device_->stream));
  device_->points.push_back({name, 0, std::move(event)});
#else
  (void)name;
#endif
  return absl::OkStatus();
}

absl::Status TracedSteps::StepStarting(int64_t step) {
  in_step_ = steps_.Contains(step) && !written_;
  if (!in_step_) return absl::OkStatus();
  if (!started_) {
    started_ = true;
    // Every rank's host and node, for the verdicts: a row of kHostNameBytes of the name
    // and one int64 of the node per rank, summed (every other row is zero).
    const int world = context_.world_size();
    constexpr int kRow = kHostNameBytes / 8 + 1;
    std::vector<int64_t> rows(static_cast<size_t>(world) * kRow, 0);
    int64_t* mine = rows.data() + static_cast<size_t>(context_.rank.rank) * kRow;
    std::memcpy(mine, host_name_.data(), std::min<size_t>(host_name_.size(), kHostNameBytes - 1));
    mine[kRow - 1] = context_.rank.node_index;
    if (world > 1) {
      RETURN_IF_ERROR(
          host_.AllReduce(rows.data(), rows.size(), ElementType::kInt64, ReduceOp::kSum));
    }
    for (int r = 0; r < world; ++r) {
      const int64_t* row = rows.data() + static_cast<size_t>(r) * kRow;
      const char* name = reinterpret_cast<const char*>(row);
      places_.push_back(
          {r, std::string(name, strnlen(name, kHostNameBytes)), static_cast<int>(row[kRow - 1])});
    }
    recorder_.Start();
    RETURN_IF_ERROR(MeasureClock("start"));
    // Rank 0 answers the pings rank by rank: line the ranks up again before the step, so
    // that no rank's first traced step starts waiting for the others.
    if (world > 1) {
      int64_t line_up = 0;
      RETURN_IF_ERROR(host_.AllReduce(&line_up, 1, ElementType::kInt64, ReduceOp::kSum));
    }
#ifdef STOKER_WITH_CUDA
    if (context_.use_cuda) {
      device_->stream = at::cuda::getCurrentCUDAStream(context_.cuda_device).stream();
      ASSIGN_OR_RETURN(device_->reference, CudaEvent::Create(cudaEventDefault));
      RETURN_IF_ERROR(device_->reference.Record(device_->stream));
      RETURN_IF_ERROR(device_->reference.Synchronize());
      device_->reference_us = TraceNowMicros();
      RETURN_IF_ERROR(timeline_->Anchor(device_->stream));
    }
#endif
  }
#ifdef STOKER_WITH_CUDA
  if (timeline_ != nullptr) {
    // The last step's intervals whose work has finished; a fresh anchor if the stream is
    // idle (Note [Device intervals on the host's clock]). Neither waits for the device.
    RETURN_IF_ERROR(timeline_->Collect());
    RETURN_IF_ERROR(timeline_->TryAnchor(device_->stream).status());
  }
#endif
  times_ = RankStepTimes();
  step_start_us_ = TraceNowMicros();
  return RecordDevicePoint("start");
}

void TracedSteps::BatchArrived(int64_t epoch, int64_t batch, int64_t start_us, int64_t end_us,
                               absl::Duration data_wait) {
  if (!in_step_) return;
  const int64_t wait_us =
      std::min<int64_t>(absl::ToInt64Microseconds(data_wait), end_us - start_us);
  recorder_.Complete(kTrainingTraceThread, "data wait", "input", start_us, start_us + wait_us,
                     TraceArgs().Add("epoch", epoch).Add("batch", batch));
  recorder_.Complete(kTrainingTraceThread, "copy", "copy", start_us + wait_us, end_us);
  // The batch's flow from the data service that published it (an end with no start, a
  // synthetic batch's, is dropped by the merge).
  recorder_.FlowEnd(kTrainingTraceThread, "batch",
                    RingBatchFlowId(context_.rank.rank, epoch, batch), start_us + wait_us);
  times_.input_ms += wait_us / 1e3;
  times_.copy_ms += (end_us - start_us - wait_us) / 1e3;
  (void)RecordDevicePoint("batch");
}

void TracedSteps::Voted(int64_t start_us, int64_t end_us) {
  if (!in_step_) return;
  recorder_.Complete(kTrainingTraceThread, "stop vote", "communication", start_us, end_us);
  times_.comm_ms += (end_us - start_us) / 1e3;
}

void TracedSteps::Computed(int64_t start_us, int64_t end_us, double comm_seconds) {
  if (!in_step_) return;
  times_.compute_ms += std::max(0.0, (end_us - start_us) / 1e3 - comm_seconds * 1e3);
  times_.comm_ms += comm_seconds * 1e3;
}

absl::Status TracedSteps::StepEnded(int64_t step, RunReporter& reporter) {
  if (!in_step_) return absl::OkStatus();
  in_step_ = false;
  RETURN_IF_ERROR(RecordDevicePoint("end"));
  const int64_t end_us = TraceNowMicros();
  times_.step_ms = (end_us - step_start_us_) / 1e3;
  recorder_.Complete(kTrainingTraceThread, absl::StrCat("step ", step), "step", step_start_us_,
                     end_us,
                     TraceArgs()
                         .Add("step", step)
                         .Add("input_ms", times_.input_ms)
                         .Add("copy_ms", times_.copy_ms)
                         .Add("compute_ms", times_.compute_ms)
                         .Add("comm_ms", times_.comm_ms));
  const int world = context_.world_size();
  std::vector<float> all(static_cast<size_t>(world) * kTimesPerRank, 0.0f);
  float* mine = all.data() + static_cast<size_t>(context_.rank.rank) * kTimesPerRank;
  mine[0] = static_cast<float>(times_.input_ms);
  mine[1] = static_cast<float>(times_.copy_ms);
  mine[2] = static_cast<float>(times_.compute_ms);
  mine[3] = static_cast<float>(times_.comm_ms);
  mine[4] = static_cast<float>(times_.step_ms);
  if (timeline_ != nullptr) RETURN_IF_ERROR(timeline_->Collect());
  // Not traced itself: the gathering is the trace's, not the step's.
  recorder_.Pause();
  if (world > 1) {
    RETURN_IF_ERROR(host_.AllReduce(all.data(), all.size(), ElementType::kFloat32, ReduceOp::kSum));
  }
  std::vector<RankStepTimes> ranks(world);
  for (int r = 0; r < world; ++r) {
    const float* row = all.data() + static_cast<size_t>(r) * kTimesPerRank;
    ranks[r] = {row[0], row[1], row[2], row[3], row[4]};
  }
  double slowest = 0;
  for (const RankStepTimes& t : ranks) slowest = std::max(slowest, t.step_ms);
  step_ms_.push_back(slowest);
  const StepVerdict verdict = JudgeStep(step, ranks, places_, Median(step_ms_));
  RETURN_IF_ERROR(reporter.TraceVerdict(verdict));
  if (context_.rank0()) {
    recorder_.Start();
    recorder_.Instant(kTrainingTraceThread, absl::StrCat("verdict: ", StepBoundName(verdict.bound)),
                      "verdict", end_us, TraceArgs().Add("text", verdict.text));
    recorder_.Pause();
  }
  if (step + 1 < steps_.end) {
    recorder_.Start();
    return absl::OkStatus();
  }
  recorder_.Start();
  RETURN_IF_ERROR(MeasureClock("end"));
  return WriteTrace();
}

absl::Status TracedSteps::Finish() {
  if (!started_ || written_) return absl::OkStatus();
  RETURN_IF_ERROR(MeasureClock("end"));
  return WriteTrace();
}

absl::Status TracedSteps::WriteTrace() {
  written_ = true;
#ifdef STOKER_WITH_CUDA
  // Note [GPU intervals].
  if (context_.use_cuda && !device_->points.empty()) {
    RETURN_IF_ERROR(device_->points.back().event.Synchronize());
    auto host_us = [&](const CudaEvent& event) -> absl::StatusOr<int64_t> {
      ASSIGN_OR_RETURN(float ms, event.ElapsedMs(device_->reference));
      return device_->reference_us + static_cast<int64_t>(ms * 1e3);
    };
    for (size_t i = 0; i + 1 < device_->points.size(); ++i) {
      const auto& from = device_->points[i];
      const auto& to = device_->points[i + 1];
      if (from.name == std::string("end")) continue;  // between steps
      ASSIGN_OR_RETURN(int64_t start, host_us(from.event));
      ASSIGN_OR_RETURN(int64_t end, host_us(to.event));
      recorder_.Complete(kGpuTraceThread,
                         from.name == std::string("start") ? "GPU: input" : "GPU: step", "gpu",
                         start, end);
    }
  }
#endif
  if (timeline_ != nullptr) {
    RETURN_IF_ERROR(timeline_->Drain());
    recorder_.SetMetadata(
        "gpu_intervals",
        absl::StrCat("{\"written\":", timeline_->written(), ",\"dropped\":", timeline_->dropped(),
                     ",\"anchor_error_us\":", timeline_->anchor_error_us(), "}"));
  }
  recorder_.Pause();
  recorder_.SetMetadata("kind", "\"rank\"");
  recorder_.SetMetadata("rank", absl::StrCat(context_.rank.rank));
  recorder_.SetMetadata("world_size", absl::StrCat(context_.world_size()));
  recorder_.SetMetadata("node", absl::StrCat(context_.rank.node_index));
  recorder_.SetMetadata("host", TraceJsonString(host_name_));
  recorder_.SetMetadata("steps", absl::StrCat("[", steps_.first, ",", steps_.end, "]"));
  recorder_.SetMetadata("clock_offsets", absl::StrCat("[", absl::StrJoin(clock_json_, ","), "]"));
  RETURN_IF_ERROR(recorder_.Finish());
  if (context_.rank0())
    LogInfo("trace of steps %d..%d written to %s", steps_.first, steps_.end - 1, recorder_.path());
  return absl::OkStatus();
}

}  // namespace stoker::trainer
