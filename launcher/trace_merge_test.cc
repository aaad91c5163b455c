#include "launcher/trace_merge.h"

#include <string>

#include "common/atomic_file.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "common/trace_events.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::launcher {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A rank's file whose clock is `offset` behind rank 0's, measured at 1000 and 9000.
void WriteRank(const std::string& dir, int rank, int node, int64_t offset, int64_t error) {
  TraceRecorder trace(absl::StrCat(dir, "/rank", rank, ".json"), rank, absl::StrCat("rank ", rank));
  trace.Start();
  trace.Complete(1, "step 0", "step", 2000 - offset, 3000 - offset);
  if (rank == 0) {
    trace.Complete(9, "ping", "clock", 2500, 2510);
    trace.FlowStart(9, "ping", 77, 2500);
  } else {
    trace.Complete(9, "ping received", "clock", 2520 - offset, 2540 - offset);
    trace.FlowEnd(9, "ping", 77, 2540 - offset);
  }
  trace.SetMetadata("kind", "\"rank\"");
  trace.SetMetadata("rank", absl::StrCat(rank));
  trace.SetMetadata("node", absl::StrCat(node));
  trace.SetMetadata(
      "clock_offsets",
      absl::StrCat("[{\"measured_at_us\":1000,\"offset_us\":", offset, ",\"error_us\":", error,
                   "},{\"measured_at_us\":9000,\"offset_us\":", offset, ",\"error_us\":", error,
                   "}]"));
  ASSERT_OK(trace.Finish());
}

TEST(TraceMergeTest, PutsRanksAndDataServicesOnRankZerosClock) {
  ASSERT_OK_AND_ASSIGN(TempDir dir, TempDir::Create("trace_merge"));
  WriteRank(dir.path(), 0, 0, 0, 0);
  WriteRank(dir.path(), 1, 1, 500, 3);
  {
    TraceRecorder service(dir.path() + "/data_service.node1.json", 1000001, "data service");
    service.Start();
    service.Complete(100, "sample", "decode", 1900 - 500, 1950 - 500,
                     TraceArgs().Add("bytes", 2000).Add("decode_ms", 0.04).Add("read_ms", 0.01));
    service.FlowStart(100, "batch", 5, 1940 - 500);  // its batch was taken by no traced step
    service.SetMetadata("kind", "\"data_service\"");
    service.SetMetadata("node", "1");
    service.SetMetadata("decode_threads", "2");
    ASSERT_OK(service.Finish());
  }
  ASSERT_OK_AND_ASSIGN(TraceMergeSummary summary, MergeTrace(dir.path()));
  EXPECT_EQ(summary.ranks, 2);
  EXPECT_EQ(summary.data_services, 1);
  EXPECT_EQ(summary.max_clock_error_us, 3);
  EXPECT_EQ(summary.unpaired_flows, 1);
  ASSERT_EQ(summary.data_service_lines.size(), 1u);
  EXPECT_THAT(summary.data_service_lines[0],
              HasSubstr("node 1 (data service): 1 samples, mean 0.05 ms (read 0.01, decode 0.04"));
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(dir.path() + "/job_trace.json"));
  const nlohmann::json merged = nlohmann::json::parse(text);
  std::map<std::pair<int, std::string>, int64_t> ts;
  for (const nlohmann::json& event : merged["traceEvents"]) {
    if (event.contains("ts")) {
      ts[{event["pid"].get<int>(),
          event["ph"].get<std::string>() + event["name"].get<std::string>()}] =
          event["ts"].get<int64_t>();
    }
  }
  // Both ranks' step 0 start at rank 0's 2000; times count from the first event (1900).
  EXPECT_EQ((ts[{0, "Xstep 0"}]), 100);
  EXPECT_EQ((ts[{1, "Xstep 0"}]), 100);
  EXPECT_EQ((ts[{1000001, "Xsample"}]), 0);
  // The ping arrives after it left.
  EXPECT_GT((ts[{1, "fping"}]), (ts[{0, "sping"}]));
  EXPECT_EQ(merged["stoker"]["origin_us"], 1900);
  EXPECT_EQ(merged["stoker"]["processes"].size(), 3u);
}

TEST(TraceMergeTest, KeepsWhatAFileCutShortHoldsAndNamesItAndAnEmptyOne) {
  ASSERT_OK_AND_ASSIGN(TempDir dir, TempDir::Create("trace_merge"));
  WriteRank(dir.path(), 0, 0, 0, 0);
  WriteRank(dir.path(), 1, 0, 0, 0);
  // Rank 1's file cut in the middle of its "stoker" object, as by a kill while writing;
  // the data service's empty, as opened and never written.
  const std::string rank1 = dir.path() + "/rank1.json";
  ASSERT_OK_AND_ASSIGN(std::string whole, ReadWholeFile(rank1));
  const size_t cut = whole.find("\"clock_offsets\"");
  ASSERT_NE(cut, std::string::npos);
  ASSERT_OK(WriteFileAtomically(rank1, whole.substr(0, cut)));
  ASSERT_OK(WriteFileAtomically(dir.path() + "/data_service.node0.json", ""));
  ASSERT_OK_AND_ASSIGN(TraceMergeSummary summary, MergeTrace(dir.path()));
  EXPECT_EQ(summary.ranks, 2);
  EXPECT_EQ(summary.data_services, 0);
  ASSERT_EQ(summary.damaged_files.size(), 2u);
  EXPECT_THAT(summary.damaged_files[0], HasSubstr("data_service.node0.json: empty"));
  EXPECT_THAT(summary.damaged_files[1], HasSubstr("rank1.json: cut short"));
  EXPECT_THAT(summary.damaged_files[1], HasSubstr("events kept, on its own clock"));
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(dir.path() + "/job_trace.json"));
  const nlohmann::json merged = nlohmann::json::parse(text);
  int rank1_steps = 0;
  bool rank1_named = false;
  for (const nlohmann::json& event : merged["traceEvents"]) {
    if (event["pid"] != 1) continue;
    if (event["name"] == "step 0") ++rank1_steps;
    if (event["name"] == "process_name") rank1_named = event["args"]["name"] == "rank 1";
  }
  EXPECT_EQ(rank1_steps, 1);
  EXPECT_TRUE(rank1_named);
  EXPECT_EQ(merged["stoker"]["damaged_files"].size(), 2u);

  // A file cut inside its first line holds nothing: left out, and named.
  ASSERT_OK(WriteFileAtomically(rank1, whole.substr(0, 30)));
  ASSERT_OK_AND_ASSIGN(summary, MergeTrace(dir.path()));
  EXPECT_EQ(summary.ranks, 1);
  ASSERT_EQ(summary.damaged_files.size(), 2u);
  EXPECT_THAT(summary.damaged_files[1], HasSubstr("rank1.json: cut short, "));
  EXPECT_THAT(summary.damaged_files[1], HasSubstr("left out"));
}

TEST(TraceMergeTest, ADirectoryOfOnlyDamagedFilesIsDataLossNamingThem) {
  ASSERT_OK_AND_ASSIGN(TempDir dir, TempDir::Create("trace_merge"));
  ASSERT_OK(WriteFileAtomically(dir.path() + "/rank0.json", ""));
  ASSERT_OK(WriteFileAtomically(dir.path() + "/data_service.node0.json", "{\"traceEv"));
  EXPECT_THAT(MergeTrace(dir.path()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("rank0.json: empty"),
                             HasSubstr("data_service.node0.json: cut short"))));
}

TEST(TraceMergeTest, ADirectoryWithoutTracesIsNotFound) {
  ASSERT_OK_AND_ASSIGN(TempDir dir, TempDir::Create("trace_merge"));
  EXPECT_THAT(MergeTrace(dir.path()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no rank*.json")));
}

TEST(TraceMergeTest, AFileThatIsNotAStokerTraceIsRefused) {
  ASSERT_OK_AND_ASSIGN(TempDir dir, TempDir::Create("trace_merge"));
  ASSERT_OK(WriteFileAtomically(dir.path() + "/rank0.json", "{\"traceEvents\": []}"));
  EXPECT_THAT(MergeTrace(dir.path()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank0.json")));
}

TEST(TraceCommandTest, RecognisesAndChecksItsArguments) {
  EXPECT_TRUE(IsTraceCommand({"trace", "merge", "d"}));
  EXPECT_FALSE(IsTraceCommand({"--np=2"}));
  EXPECT_EQ(RunTraceCommand({"merge"}), 2);
  EXPECT_EQ(RunTraceCommand({"split", "d"}), 2);
  EXPECT_EQ(RunTraceCommand({"merge", "/nonexistent/trace/dir"}), 1);
}

}  // namespace
}  // namespace stoker::launcher
