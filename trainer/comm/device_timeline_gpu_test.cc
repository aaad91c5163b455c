// DeviceTimeline on a real GPU: intervals of memsets enqueued on a stream are read back
// without waiting for the device, come out in order, do not overlap, lie within the host
// times around them, and last as long as their work; an empty pool drops and counts; work
// being captured into a graph is not timed.
#include "trainer/comm/device_timeline.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/cuda_stream.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "common/trace_events.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 30;
constexpr int kMemsetsPerInterval = 20;

class DeviceTimelineGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "needs a GPU";
    ASSERT_GT(devices, 0) << "needs a GPU";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&buffer_, kBufferBytes), cudaSuccess);
    ASSERT_OK_AND_ASSIGN(stream_, CudaStream::Create(0));
  }
  void TearDown() override {
    if (buffer_ != nullptr) cudaFree(buffer_);
  }
  void Work() {
    for (int i = 0; i < kMemsetsPerInterval; ++i) {
      ASSERT_EQ(cudaMemsetAsync(buffer_, i, kBufferBytes, stream_.get()), cudaSuccess);
    }
  }

  void* buffer_ = nullptr;
  CudaStream stream_;
};

TEST_F(DeviceTimelineGpuTest, IntervalsAreReadWithoutWaitingAndLieWhereTheWorkRan) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("timeline"));
  TraceRecorder recorder(dir.path() + "/t.json", 0, "rank 0");
  recorder.Start();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceTimeline> timeline, DeviceTimeline::Create(&recorder));
  ASSERT_OK(timeline->Anchor(stream_.get()));
  const int64_t enqueued = TraceNowMicros();
  constexpr int kIntervals = 4;
  for (int i = 0; i < kIntervals; ++i) {
    timeline->Label(3, "bucket " + std::to_string(i) + " all-reduce", TraceArgs().Add("bucket", i));
    const int ticket = timeline->Started(stream_.get());
    ASSERT_GE(ticket, 0);
    Work();
    timeline->Done(ticket, stream_.get());
  }
  const int64_t collect_start = TraceNowMicros();
  ASSERT_OK(timeline->Collect());
  const int64_t collect_us = TraceNowMicros() - collect_start;
  const int64_t collected = timeline->written();
  ASSERT_OK(timeline->Drain());
  const int64_t drained = TraceNowMicros();
  std::printf(
      "collect took %lld us and wrote %lld of %d intervals in flight; drain wrote %lld; "
      "anchor error %lld us\n",
      static_cast<long long>(collect_us), static_cast<long long>(collected), kIntervals,
      static_cast<long long>(timeline->written()),
      static_cast<long long>(timeline->anchor_error_us()));
  EXPECT_LT(collect_us, 2000) << "Collect waited for the device";
  EXPECT_LT(collected, kIntervals) << "the last interval's work cannot have finished yet";
  EXPECT_EQ(timeline->written(), kIntervals);
  EXPECT_EQ(timeline->dropped(), 0);
  EXPECT_LT(timeline->anchor_error_us(), 1000);

  ASSERT_OK(recorder.Finish());
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(recorder.path()));
  const nlohmann::json trace = nlohmann::json::parse(text);
  std::vector<nlohmann::json> gpu;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event.value("cat", "") == "gpu") gpu.push_back(event);
  }
  ASSERT_EQ(gpu.size(), static_cast<size_t>(kIntervals));
  const int64_t slack = timeline->anchor_error_us() + 50;
  int64_t last_end = 0;
  for (int i = 0; i < kIntervals; ++i) {
    const nlohmann::json& event = gpu[i];
    const int64_t ts = event["ts"].get<int64_t>();
    const int64_t dur = event["dur"].get<int64_t>();
    std::printf("  %s: [%lld, +%lld us] after the enqueue at %lld\n",
                event["name"].get<std::string>().c_str(), static_cast<long long>(ts),
                static_cast<long long>(dur), static_cast<long long>(ts - enqueued));
    EXPECT_EQ(event["name"], "bucket " + std::to_string(i) + " all-reduce");
    EXPECT_EQ(event["tid"], 3);
    EXPECT_EQ(event["args"]["bucket"], i);
    EXPECT_GE(ts, enqueued - slack) << "started before it was enqueued";
    EXPECT_LE(ts + dur, drained + slack) << "ended after the host saw it end";
    EXPECT_GE(ts, last_end) << "overlaps the interval before it on one stream";
    // 20 GiB of memset takes milliseconds on any GPU this runs on.
    EXPECT_GT(dur, 1000) << "shorter than its work";
    last_end = ts + dur;
  }
}

TEST_F(DeviceTimelineGpuTest, AnEmptyPoolDropsAndCountsAndCapturedWorkIsNotTimed) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("timeline"));
  TraceRecorder recorder(dir.path() + "/t.json", 0, "rank 0");
  recorder.Start();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceTimeline> timeline,
                       DeviceTimeline::Create(&recorder, /*pool_intervals=*/2));
  // Before any anchor nothing is timed.
  EXPECT_EQ(timeline->Started(stream_.get()), -1);
  ASSERT_OK(timeline->Anchor(stream_.get()));
  for (int i = 0; i < 3; ++i) {
    const int ticket = timeline->Started();  // the home stream
    EXPECT_EQ(ticket >= 0, i < 2) << i;
    timeline->Done(ticket);
  }
  EXPECT_EQ(timeline->dropped(), 1);

  ASSERT_OK(timeline->Drain());  // frees the pool; waits, so never while this thread captures
  cudaStream_t capturing = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(timeline->Started(capturing), -1) << "timed work inside a graph capture";
  ASSERT_EQ(cudaMemsetAsync(buffer_, 0, 1024, capturing), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(capturing, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(capturing);
  EXPECT_EQ(timeline->written(), 2);

  // Not recording: nothing timed.
  recorder.Pause();
  EXPECT_EQ(timeline->Started(), -1);
}

}  // namespace
}  // namespace stoker::trainer
