// MergeTrace: one Chrome trace for the whole job (`launcher trace merge DIR`, and the
// launcher itself at the end of a job run with --trace) from the files its ranks and data
// services wrote into DIR (common/trace_events.h): every event moved onto rank 0's clock
// (Note [One clock for the job]), one process per rank and per data service, and what the
// clocks and the data services say, summed up in the file's "stoker" object.
#ifndef STOKER_LAUNCHER_TRACE_MERGE_H_
#define STOKER_LAUNCHER_TRACE_MERGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::launcher {

// The merged trace's file in DIR.
inline constexpr char kMergedTraceName[] = "job_trace.json";

// What one merge did.
struct TraceMergeSummary {
  std::string path;                // the merged file
  int ranks = 0;                   // rank files merged
  int data_services = 0;           // data-service files merged
  int64_t events = 0;              // events written (metadata included)
  int64_t unpaired_flows = 0;      // flow ends left out: their other end is outside the trace
  int64_t max_clock_error_us = 0;  // the largest residual error of any process's offset
  // One line per data service: its samples in the window and their mean read, decode and
  // resize times, e.g. "node 1 (data service of node 1 on gpu07): 480 samples, mean 4.1 ms
  // (read 0.1, decode 3.2, resize 0.8), 113 KB per file, 4 decode threads".
  std::vector<std::string> data_service_lines;
  // One line per file that was empty or cut short (Note [Damaged trace files]), naming it
  // and what of it was merged.
  std::vector<std::string> damaged_files;
};

// Merges DIR/rank*.json and DIR/data_service.node*.json into DIR/job_trace.json (or `out`
// when not empty). A rank's offset against rank 0 is interpolated between its measurement
// at the window's start and at its end; a data service takes the offset of its node's rank
// with the smallest error. Times are then counted from the job's first event; a flow end
// whose other end no file holds is left out. A file that is empty is left out, one cut
// short gives the events it holds; both are named in `damaged_files`. NotFound when DIR
// holds no trace; DataLoss when no file of it is usable; InvalidArgument naming a file that
// is complete JSON but not a Stoker trace.
absl::StatusOr<TraceMergeSummary> MergeTrace(const std::string& dir, const std::string& out = "");

// Whether `args` (argv without argv[0]) is `launcher trace ...`.
bool IsTraceCommand(const std::vector<std::string>& args);

// `launcher trace merge DIR [--out=FILE]` with `args` after "trace": merges and prints the
// summary; returns the exit code (0, 1 on failure, 2 for a usage error).
int RunTraceCommand(const std::vector<std::string>& args);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_TRACE_MERGE_H_
