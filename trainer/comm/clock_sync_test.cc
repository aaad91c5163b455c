// Runs as 3 ranks on one machine: every rank shares rank 0's CLOCK_MONOTONIC, so the
// measured offsets are within their error of zero.
#include "trainer/comm/clock_sync.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "common/atomic_file.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {
namespace {

TEST(ClockSyncTest, RanksOfOneMachineAreWithinTheirErrorOfRankZero) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_OK_AND_ASSIGN(ClockOffset offset, MeasureClockOffset(MPI_COMM_WORLD, 8, nullptr));
  EXPECT_EQ(offset.rounds, 8);
  if (rank == 0) {
    EXPECT_EQ(offset.offset_us, 0);
    EXPECT_EQ(offset.error_us, 0);
    return;
  }
  EXPECT_GE(offset.round_trip_us, 0);
  EXPECT_LE(std::llabs(offset.offset_us), offset.error_us + 1);
  const nlohmann::json json = nlohmann::json::parse(offset.Json());
  EXPECT_EQ(json["offset_us"], offset.offset_us);
  EXPECT_EQ(json["error_us"], offset.error_us);
}

TEST(ClockSyncTest, ThePingIsAFlowFromRankZeroReceivedAfterItWasSent) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/clock_sync_rank" + std::to_string(rank);
  TraceRecorder trace(path, rank, "rank");
  trace.Start();
  ASSERT_OK_AND_ASSIGN(ClockOffset offset, MeasureClockOffset(MPI_COMM_WORLD, 4, &trace));
  ASSERT_OK(trace.Finish());
  ASSERT_OK_AND_ASSIGN(std::string text, ReadWholeFile(path));
  const nlohmann::json events = nlohmann::json::parse(text)["traceEvents"];
  int flows = 0;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (const nlohmann::json& event : events) {
    if (event["ph"] == "s" || event["ph"] == "f") {
      ++flows;
      EXPECT_EQ(event["ph"], rank == 0 ? "s" : "f");
    }
    if (rank != 0 && event["name"] == "ping received") {
      // On rank 0's clock the ping arrived after rank 0 sent it.
      const int64_t received = event["ts"].get<int64_t>() + event["dur"].get<int64_t>();
      EXPECT_GE(received + offset.offset_us + offset.error_us,
                event["args"]["sent_us_on_rank0"].get<int64_t>());
    }
  }
  EXPECT_EQ(flows, rank == 0 ? world - 1 : 1);
}

}  // namespace
}  // namespace stoker::trainer
