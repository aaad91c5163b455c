#include "common/trace_events.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/errno_status.h"

namespace stoker {

int64_t TraceNowMicros() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
}

std::string TraceHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

uint64_t RingBatchFlowId(int rank, int64_t epoch, int64_t step) {
  const uint64_t r = static_cast<uint64_t>(rank) & ((uint64_t{1} << 19) - 1);
  const uint64_t e = static_cast<uint64_t>(epoch) & ((uint64_t{1} << 13) - 1);
  const uint64_t s = static_cast<uint64_t>(step) & ((uint64_t{1} << 20) - 1);
  return (((r << 13) | e) << 20) | s;
}

absl::StatusOr<TraceSteps> ParseTraceSteps(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  TraceSteps steps;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &steps.first) ||
      !absl::SimpleAtoi(parts[1], &steps.end) || steps.first < 0 || steps.end <= steps.first) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_steps=", text, ": must be A:B, the steps [A, B) with 0 <= A < B"));
  }
  return steps;
}

std::string TraceJsonString(absl::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

void TraceArgs::Key(absl::string_view key) {
  if (!json_.empty()) json_ += ",";
  absl::StrAppend(&json_, TraceJsonString(key), ":");
}

TraceArgs& TraceArgs::Add(absl::string_view key, absl::string_view value) {
  Key(key);
  json_ += TraceJsonString(value);
  return *this;
}

TraceArgs& TraceArgs::Add(absl::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&json_, value);
  return *this;
}

TraceArgs& TraceArgs::Add(absl::string_view key, double value) {
  Key(key);
  if (std::isfinite(value)) {
    absl::StrAppend(&json_, absl::StrFormat("%.6g", value));
  } else {
    json_ += "null";
  }
  return *this;
}

TraceArgs& TraceArgs::AddJson(absl::string_view key, absl::string_view json) {
  Key(key);
  absl::StrAppend(&json_, json);
  return *this;
}

std::string TraceArgs::Json() const { return absl::StrCat("{", json_, "}"); }

absl::StatusOr<UniqueFd> OpenTraceFile(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (absl::Status made = MakeDirectories(path.substr(0, slash)); !made.ok()) {
      return absl::Status(made.code(), absl::StrCat("the trace file ", path, ": ", made.message()));
    }
  }
  UniqueFd file(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!file.valid()) return ErrnoToStatus(errno, absl::StrCat("open ", path, " for the trace"));
  return file;
}

TraceRecorder::TraceRecorder(std::string path, int pid, std::string process_name)
    : path_(std::move(path)), pid_(pid), process_name_(std::move(process_name)) {}

void TraceRecorder::Start() { recording_.store(true, std::memory_order_relaxed); }

void TraceRecorder::Pause() { recording_.store(false, std::memory_order_relaxed); }

void TraceRecorder::Add(std::string event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

size_t TraceRecorder::event_count() const {
  absl::MutexLock lock(&mu_);
  return events_.size();
}

void TraceRecorder::NameThread(int tid, absl::string_view name) {
  absl::MutexLock lock(&mu_);
  for (auto& [known, known_name] : thread_names_) {
    if (known == tid) {
      known_name = std::string(name);
      return;
    }
  }
  thread_names_.emplace_back(tid, std::string(name));
}

void TraceRecorder::SetMetadata(absl::string_view key, std::string json) {
  absl::MutexLock lock(&mu_);
  for (auto& [known, value] : metadata_) {
    if (known == key) {
      value = std::move(json);
      return;
    }
  }
  metadata_.emplace_back(std::string(key), std::move(json));
}

void TraceRecorder::Complete(int tid, absl::string_view name, absl::string_view category,
                             int64_t start_us, int64_t end_us, const TraceArgs& args) {
  if (!recording()) return;
  std::string event =
      absl::StrCat("{\"ph\":\"X\",\"pid\":", pid_, ",\"tid\":", tid,
                   ",\"name\":", TraceJsonString(name), ",\"cat\":", TraceJsonString(category),
                   ",\"ts\":", start_us, ",\"dur\":", std::max<int64_t>(0, end_us - start_us));
  if (!args.empty()) absl::StrAppend(&event, ",\"args\":", args.Json());
  event += "}";
  Add(std::move(event));
}

void TraceRecorder::Instant(int tid, absl::string_view name, absl::string_view category,
                            int64_t ts_us, const TraceArgs& args) {
  if (!recording()) return;
  std::string event = absl::StrCat("{\"ph\":\"i\",\"s\":\"t\",\"pid\":", pid_, ",\"tid\":", tid,
                                   ",\"name\":", TraceJsonString(name),
                                   ",\"cat\":", TraceJsonString(category), ",\"ts\":", ts_us);
  if (!args.empty()) absl::StrAppend(&event, ",\"args\":", args.Json());
  event += "}";
  Add(std::move(event));
}

void TraceRecorder::FlowStart(int tid, absl::string_view name, uint64_t id, int64_t ts_us) {
  if (!recording()) return;
  Add(absl::StrCat("{\"ph\":\"s\",\"pid\":", pid_, ",\"tid\":", tid, ",\"name\":",
                   TraceJsonString(name), ",\"cat\":\"flow\",\"id\":", id, ",\"ts\":", ts_us, "}"));
}

void TraceRecorder::FlowEnd(int tid, absl::string_view name, uint64_t id, int64_t ts_us) {
  if (!recording()) return;
  Add(absl::StrCat("{\"ph\":\"f\",\"bp\":\"e\",\"pid\":", pid_, ",\"tid\":", tid, ",\"name\":",
                   TraceJsonString(name), ",\"cat\":\"flow\",\"id\":", id, ",\"ts\":", ts_us, "}"));
}

void TraceRecorder::Counter(absl::string_view name, int64_t ts_us, double value) {
  if (!recording()) return;
  Add(absl::StrCat("{\"ph\":\"C\",\"pid\":", pid_, ",\"tid\":0,\"name\":", TraceJsonString(name),
                   ",\"ts\":", ts_us, ",\"args\":", TraceArgs().Add("value", value).Json(), "}"));
}

void TraceRecorder::WriteThrough(UniqueFd file) {
  absl::MutexLock lock(&mu_);
  file_ = std::move(file);
}

namespace {

// Replaces the contents of `fd` with `text` (Note [Trace file before the sandbox]): only
// lseek, ftruncate, write and fsync, which the data service's sandbox allows.
absl::Status RewriteInPlace(int fd, const std::string& path, absl::string_view text) {
  if (lseek(fd, 0, SEEK_SET) != 0 || ftruncate(fd, 0) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("truncate ", path));
  }
  if (int error = WriteAll(fd, text); error != 0) {
    return ErrnoToStatus(error, absl::StrCat("write ", path));
  }
  if (fsync(fd) != 0) return ErrnoToStatus(errno, absl::StrCat("fsync ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status TraceRecorder::Finish() {
  Pause();
  return Write();
}

absl::Status TraceRecorder::Write() {
  std::string text = "{\"traceEvents\":[\n";
  absl::MutexLock lock(&mu_);
  std::vector<std::string> lines;
  lines.reserve(events_.size() + thread_names_.size() + 2);
  lines.push_back(absl::StrCat("{\"ph\":\"M\",\"pid\":", pid_,
                               ",\"tid\":0,\"name\":\"process_name\",\"args\":",
                               TraceArgs().Add("name", process_name_).Json(), "}"));
  lines.push_back(absl::StrCat("{\"ph\":\"M\",\"pid\":", pid_,
                               ",\"tid\":0,\"name\":\"process_sort_index\",\"args\":",
                               TraceArgs().Add("sort_index", pid_).Json(), "}"));
  for (const auto& [tid, name] : thread_names_) {
    lines.push_back(absl::StrCat(
        "{\"ph\":\"M\",\"pid\":", pid_, ",\"tid\":", tid,
        ",\"name\":\"thread_name\",\"args\":", TraceArgs().Add("name", name).Json(), "}"));
  }
  for (const std::string& event : events_) lines.push_back(event);
  absl::StrAppend(&text, absl::StrJoin(lines, ",\n"), "\n],\n\"displayTimeUnit\":\"ms\",\n");
  TraceArgs stoker;
  stoker.Add("pid", pid_).Add("process_name", process_name_).Add("clock", "CLOCK_MONOTONIC");
  for (const auto& [key, json] : metadata_) stoker.AddJson(key, json);
  absl::StrAppend(&text, "\"stoker\":", stoker.Json(), "\n}\n");
  if (file_.valid()) return RewriteInPlace(file_.get(), path_, text);
  return WriteFileAtomically(path_, text);
}

}  // namespace stoker
