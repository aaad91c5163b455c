// What rank 0 tells the person running the job: a progress line (epoch, step of total,
// loss, learning rate, images/s, the share of time spent waiting for data, memory, ETA)
// redrawn in place on a terminal and printed as plain lines otherwise; metrics as JSON
// lines for scripts and plots (tools/plot_metrics.py).
#ifndef STOKER_TRAINER_REPORT_PROGRESS_H_
#define STOKER_TRAINER_REPORT_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

struct ProgressSnapshot {
  int epoch = 0;  // 1-based for display
  int epochs = 0;
  int64_t step = 0;  // batches done in this epoch (1-based for display)
  int64_t steps_per_epoch = 0;
  double loss = 0;
  double learning_rate = 0;
  double images_per_second = 0;
  double data_wait_share = 0;        // 0..1, the host's wait
  double gpu_input_wait_share = -1;  // 0..1, the GPU's wait for input; negative: not shown
  double gpu_decode_share = -1;      // 0..1, of each batch decoded on the GPU; negative: not shown
  std::string memory;                // e.g. "GPU 3.2/80.0 GiB" or "RSS 1.1 GiB"; empty: not shown
  double eta_seconds = -1;           // negative: unknown
  // What bounds the job's steps, in a word, from the traced steps' verdicts ("input",
  // "copy", "compute", "communication", "straggler"; trainer/report/step_verdict.h); empty:
  // not shown.
  std::string bound;
};

// "epoch 2/10  step 120/390  loss 1.2345  lr 0.0800  1234 img/s  data 3.0%  gpu-wait 0.4%
//  gpu-decode 25%  RSS 1.1 GiB  bound input  ETA 5m12s" (on one line)
std::string FormatProgressLine(const ProgressSnapshot& snapshot);

// "42s", "5m12s", "3h07m", "2d04h".
std::string FormatEta(double seconds);

// The resident set size of this process in GiB (from /proc/self/statm); negative if unknown.
double ResidentSetGiB();

// Prints progress lines to a stream (stderr). In place (a terminal): each line overwrites
// the last with "\r...\x1b[K" and stays without a newline until a permanent message or
// Finish(). Otherwise every line is a line of its own. Thread-compatible.
class ProgressPrinter {
 public:
  // `in_place` is usually isatty(fileno(stream)).
  ProgressPrinter(std::FILE* stream, bool in_place) : stream_(stream), in_place_(in_place) {}
  ~ProgressPrinter() { Finish(); }

  void Update(absl::string_view line);
  // Ends a pending in-place line so that what follows starts on a line of its own. Call
  // before logging anything else.
  void Finish();
  bool in_place() const { return in_place_; }

 private:
  std::FILE* stream_;
  bool in_place_;
  bool pending_ = false;
};

// Builds one JSON object, in insertion order. Non-finite numbers become null.
class JsonObject {
 public:
  JsonObject& Add(absl::string_view key, double value);
  JsonObject& Add(absl::string_view key, int64_t value);
  JsonObject& Add(absl::string_view key, int value) {
    return Add(key, static_cast<int64_t>(value));
  }
  JsonObject& Add(absl::string_view key, bool value);
  JsonObject& Add(absl::string_view key, absl::string_view value);
  JsonObject& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }
  std::string Build() const;  // "{...}" without a newline

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key, encoded value
};

// Appends JSON lines to a file, flushing each. Thread-compatible.
class JsonlWriter {
 public:
  // Opens `path` for appending (a resumed run continues the same file). Errors name the flag.
  static absl::StatusOr<std::unique_ptr<JsonlWriter>> Open(const std::string& path);
  ~JsonlWriter();
  absl::Status Write(const JsonObject& object);

 private:
  JsonlWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_PROGRESS_H_
