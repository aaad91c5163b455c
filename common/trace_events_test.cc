#include "common/trace_events.h"

#include <dirent.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/atomic_file.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker {
namespace {

using ::stoker::testing::IsOk;
using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TraceStepsTest, ParsesAWindow) {
  ASSERT_OK_AND_ASSIGN(TraceSteps steps, ParseTraceSteps("5:12"));
  EXPECT_EQ(steps.first, 5);
  EXPECT_EQ(steps.end, 12);
  EXPECT_TRUE(steps.Contains(5));
  EXPECT_TRUE(steps.Contains(11));
  EXPECT_FALSE(steps.Contains(12));
}

TEST(TraceStepsTest, RefusesEmptyOrMalformedWindows) {
  for (const char* text : {"5:5", "6:5", "-1:3", "3", "a:b", "1:2:3", ""}) {
    EXPECT_THAT(ParseTraceSteps(text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--trace_steps")))
        << text;
  }
}

TEST(TraceJsonStringTest, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(TraceJsonString("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
}

TEST(TraceRecorderTest, DropsEventsOutsideTheWindow) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("trace"));
  TraceRecorder trace(dir.path() + "/t.json", 3, "rank 3");
  trace.Complete(1, "before", "x", 0, 10);
  {
    TraceSpan span(&trace, 1, "also before", "x");
    EXPECT_FALSE(span.active());
  }
  trace.Start();
  {
    TraceSpan span(&trace, 1, "inside", "x");
    EXPECT_TRUE(span.active());
  }
  trace.Pause();
  trace.Instant(1, "after", "x", 5);
  EXPECT_EQ(trace.event_count(), 1u);
  TraceSpan null_span(nullptr, 1, "no recorder", "x");
  EXPECT_FALSE(null_span.active());
}

TEST(TraceRecorderTest, WritesTraceEventJsonWithNamesFlowsAndMetadata) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("trace"));
  const std::string path = dir.path() + "/rank0.json";
  TraceRecorder trace(path, 7, "rank 7 on \"host\"");
  trace.NameThread(1, "training");
  trace.SetMetadata("rank", "7");
  trace.Start();
  trace.Complete(1, "forward", "compute", 100, 250, TraceArgs().Add("step", 4).Add("file", "a\"b"));
  trace.Instant(1, "issued", "comm", 120);
  trace.FlowStart(1, "ping", 42, 110);
  trace.FlowEnd(1, "ping", 42, 200);
  trace.Counter("ring slots ready", 130, 2.0);
  ASSERT_THAT(trace.Finish(), IsOk());
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(path));
  const nlohmann::json json = nlohmann::json::parse(text);
  EXPECT_EQ(json["stoker"]["rank"], 7);
  EXPECT_EQ(json["stoker"]["process_name"], "rank 7 on \"host\"");
  const nlohmann::json& events = json["traceEvents"];
  ASSERT_EQ(events.size(), 3u + 5u);  // process name, sort index, thread name; five events
  EXPECT_EQ(events[0]["name"], "process_name");
  EXPECT_EQ(events[0]["args"]["name"], "rank 7 on \"host\"");
  EXPECT_EQ(events[2]["args"]["name"], "training");
  const nlohmann::json& forward = events[3];
  EXPECT_EQ(forward["ph"], "X");
  EXPECT_EQ(forward["pid"], 7);
  EXPECT_EQ(forward["ts"], 100);
  EXPECT_EQ(forward["dur"], 150);
  EXPECT_EQ(forward["args"]["file"], "a\"b");
  EXPECT_EQ(events[5]["ph"], "s");
  EXPECT_EQ(events[6]["ph"], "f");
  EXPECT_EQ(events[6]["id"], 42);
  EXPECT_EQ(events[7]["ph"], "C");
}

TEST(TraceRecorderTest, RecordsFromManyThreads) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("trace"));
  TraceRecorder trace(dir.path() + "/t.json", 0, "p");
  trace.Start();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&trace, t] {
      for (int i = 0; i < 100; ++i) TraceSpan span(&trace, t, "work", "x");
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(trace.event_count(), 400u);
  ASSERT_THAT(trace.Finish(), IsOk());
}

TEST(RingBatchFlowIdTest, IsUniquePerBatchAndBelowTwoToThe52) {
  EXPECT_NE(RingBatchFlowId(1, 0, 5), RingBatchFlowId(2, 0, 5));
  EXPECT_NE(RingBatchFlowId(1, 0, 5), RingBatchFlowId(1, 1, 5));
  EXPECT_NE(RingBatchFlowId(1, 0, 5), RingBatchFlowId(1, 0, 6));
  EXPECT_LT(RingBatchFlowId((1 << 19) - 1, 8191, (1 << 20) - 1), uint64_t{1} << 52);
}

TEST(TraceRecorderTest, WriteKeepsRecording) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("trace"));
  TraceRecorder trace(dir.path() + "/t.json", 0, "p");
  trace.Start();
  trace.Instant(0, "a", "x", 1);
  ASSERT_THAT(trace.Write(), IsOk());
  EXPECT_TRUE(trace.recording());
  trace.Instant(0, "b", "x", 2);
  ASSERT_THAT(trace.Finish(), IsOk());
  EXPECT_FALSE(trace.recording());
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(dir.path() + "/t.json"));
  EXPECT_EQ(nlohmann::json::parse(text)["traceEvents"].size(), 2u + 2u);
}

TEST(TraceRecorderTest, WritesThroughAFileOpenedBeforeInPlace) {
  ASSERT_OK_AND_ASSIGN(testing::TempDir dir, testing::TempDir::Create("trace"));
  const std::string path = dir.path() + "/sub/dir/service.json";
  ASSERT_OK_AND_ASSIGN(UniqueFd file, OpenTraceFile(path));
  // Opened now: the file is there, empty, before any event.
  ASSERT_OK_AND_ASSIGN(std::string empty, ReadWholeFile(path));
  EXPECT_EQ(empty, "");
  TraceRecorder trace(path, 1000001, "service");
  trace.WriteThrough(std::move(file));
  trace.Start();
  for (int i = 0; i < 50; ++i) trace.Instant(0, "long name to make the first write longer", "x", i);
  ASSERT_THAT(trace.Write(), IsOk());
  ASSERT_OK_AND_ASSIGN(std::string longer, ReadWholeFile(path));
  trace.Pause();
  // A later, shorter write replaces the whole file (nothing of the longer one is left).
  TraceRecorder shorter(path, 1000001, "service");
  ASSERT_OK_AND_ASSIGN(UniqueFd again, OpenTraceFile(path));
  shorter.WriteThrough(std::move(again));
  shorter.Start();
  shorter.Instant(0, "one", "x", 1);
  ASSERT_THAT(shorter.Finish(), IsOk());
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(path));
  EXPECT_LT(text.size(), longer.size());
  EXPECT_EQ(nlohmann::json::parse(text)["traceEvents"].size(), 2u + 1u);
  // Rewritten in place: no temporary file was made beside it.
  std::vector<std::string> names;
  DIR* listing = opendir((dir.path() + "/sub/dir").c_str());
  ASSERT_NE(listing, nullptr);
  while (const dirent* entry = readdir(listing)) {
    if (entry->d_name[0] != '.' || std::string(entry->d_name).size() > 2)
      names.push_back(entry->d_name);
  }
  closedir(listing);
  EXPECT_EQ(names, std::vector<std::string>{"service.json"});
}

TEST(TraceRecorderTest, OpenTraceFileNamesThePathItCannotOpen) {
  const absl::StatusOr<UniqueFd> file = OpenTraceFile("/proc/no/such/dir/t.json");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("/proc/no/such/dir"));
}

TEST(TraceNowMicrosTest, IsMonotonic) {
  const int64_t a = TraceNowMicros();
  const int64_t b = TraceNowMicros();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace stoker
