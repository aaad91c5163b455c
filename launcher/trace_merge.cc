#include "launcher/trace_merge.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace stoker::launcher {
namespace {

using Json = nlohmann::json;

// A process's clock against rank 0's: offset at two points of its own clock, linear between
// them (and constant outside), with the residual error of the measurements.
struct ClockMap {
  int64_t at_start = 0, offset_start = 0;
  int64_t at_end = 0, offset_end = 0;
  int64_t error_us = 0;
  bool measured = false;

  int64_t OffsetAt(int64_t t) const {
    if (at_end <= at_start || t <= at_start) return offset_start;
    if (t >= at_end) return offset_end;
    return offset_start + static_cast<int64_t>(static_cast<double>(offset_end - offset_start) *
                                               (t - at_start) / (at_end - at_start));
  }
};

struct TraceFile {
  std::string path;
  Json json;
  std::string kind;  // "rank" or "data_service"
  int rank = -1;
  int node = 0;
  std::string host;
  ClockMap clock;
};

absl::StatusOr<std::vector<std::string>> TraceFiles(const std::string& dir,
                                                    const std::string& out) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("trace merge: cannot open ", dir));
  std::vector<std::string> files;
  while (const dirent* entry = readdir(d.get())) {
    const std::string name = entry->d_name;
    const std::string path = absl::StrCat(dir, "/", name);
    if (!absl::EndsWith(name, ".json") || path == out || name == kMergedTraceName) continue;
    if (absl::StartsWith(name, "rank") || absl::StartsWith(name, "data_service.node")) {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat("trace merge: no rank*.json or data_service.node*.json in ", dir,
                     " (was the job run with --trace=", dir, "?)"));
  }
  return files;
}

// Note [Damaged trace files]: a rank killed before its window ended leaves no file (ranks
// write atomically), but a data service rewrites its file in place (Note [Trace file
// before the sandbox] in common/trace_events.h): killed before the window's end it leaves
// the file empty, killed while writing it leaves it cut short. The writer puts one event
// per line, metadata first, and the "stoker" object last; so the complete lines before the
// cut are the events, and the file's name says whose they are (rank<r>.json,
// data_service.node<N>.json). Such a file is merged with what it holds: a rank's on its own
// clock (its clock offsets were in the lost part), a data service's on its node's. An empty
// file is left out. Both are named in the summary.

// The events on the complete lines of a file cut short, and its kind from its name; a
// "stoker" object with no clock offsets.
absl::StatusOr<TraceFile> SalvageTraceFile(const std::string& path, const std::string& text) {
  TraceFile file;
  file.path = path;
  const std::string name = path.substr(path.rfind('/') + 1);
  int number = -1;
  if (std::sscanf(name.c_str(), "rank%d.json", &number) == 1) {
    file.kind = "rank";
    file.rank = number;
  } else if (std::sscanf(name.c_str(), "data_service.node%d.json", &number) == 1) {
    file.kind = "data_service";
    file.node = number;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("trace merge: ", path, " is not a trace file"));
  }
  Json events = Json::array();
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // the cut line
    absl::string_view line(text.data() + start, end - start);
    start = end + 1;
    if (absl::EndsWith(line, ",")) line.remove_suffix(1);
    if (!absl::StartsWith(line, "{\"ph\":")) continue;
    Json event = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (event.is_object()) events.push_back(std::move(event));
  }
  if (events.empty()) {
    return absl::DataLossError(absl::StrCat(path, " holds no complete event"));
  }
  file.json["traceEvents"] = std::move(events);
  file.json["stoker"] = {{"kind", file.kind},
                         {"damaged", "cut short: events before the cut, no clock offsets"}};
  if (file.kind == "rank") file.json["stoker"]["rank"] = file.rank;
  if (file.kind == "data_service") file.json["stoker"]["node"] = file.node;
  return file;
}

absl::StatusOr<TraceFile> ReadTraceFile(const std::string& path, std::string* damage) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  if (text.empty()) {
    *damage = absl::StrCat(path, ": empty (its process ended before its window did): left out");
    return absl::DataLossError(*damage);
  }
  TraceFile file;
  file.path = path;
  file.json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (file.json.is_discarded()) {
    // Note [Damaged trace files].
    absl::StatusOr<TraceFile> salvaged = SalvageTraceFile(path, text);
    if (!salvaged.ok()) {
      *damage = absl::StrCat(path, ": cut short, ", salvaged.status().message(), ": left out");
      return absl::DataLossError(*damage);
    }
    *damage = absl::StrCat(path, ": cut short (its process was killed while writing it): ",
                           salvaged->json["traceEvents"].size(), " events kept",
                           salvaged->kind == "rank" ? ", on its own clock" : "");
    return salvaged;
  }
  if (!file.json.is_object() || !file.json.contains("traceEvents") ||
      !file.json.contains("stoker")) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace merge: ", path, " is not a trace a Stoker rank or data service wrote"));
  }
  const Json& stoker = file.json["stoker"];
  file.kind = stoker.value("kind", "");
  file.rank = stoker.value("rank", -1);
  file.node = stoker.value("node", 0);
  file.host = stoker.value("host", "");
  if (file.kind == "rank") {
    // Note [One clock for the job] (common/trace_events.h).
    const Json offsets = stoker.value("clock_offsets", Json::array());
    for (const Json& offset : offsets) {
      const int64_t at = offset.value("measured_at_us", int64_t{0});
      const int64_t value = offset.value("offset_us", int64_t{0});
      file.clock.error_us = std::max(file.clock.error_us, offset.value("error_us", int64_t{0}));
      if (!file.clock.measured) {
        file.clock = {at, value, at, value, file.clock.error_us, true};
      } else {
        file.clock.at_end = at;
        file.clock.offset_end = value;
      }
    }
    file.clock.error_us += std::abs(file.clock.offset_end - file.clock.offset_start) / 2;
  }
  return file;
}

// The data services' figures: samples and their mean stages, from the decode slices.
std::string DataServiceLine(const TraceFile& file) {
  int64_t samples = 0;
  double total_ms = 0, read_ms = 0, decode_ms = 0, resize_ms = 0, bytes = 0;
  for (const Json& event : file.json["traceEvents"]) {
    if (event.value("ph", "") != "X" || event.value("cat", "") != "decode") continue;
    ++samples;
    total_ms += event.value("dur", 0.0) / 1e3;
    const Json args = event.value("args", Json::object());
    read_ms += args.value("read_ms", 0.0);
    decode_ms += args.value("decode_ms", 0.0);
    resize_ms += args.value("resize_ms", 0.0);
    bytes += args.value("bytes", 0.0);
  }
  const double n = std::max<int64_t>(samples, 1);
  return absl::StrFormat(
      "node %d (%s): %d samples, mean %.2f ms (read %.2f, decode %.2f, resize %.2f), %.0f KB "
      "per file, %d decode threads",
      file.node, file.json["stoker"].value("process_name", ""), samples, total_ms / n, read_ms / n,
      decode_ms / n, resize_ms / n, bytes / n / 1e3,
      file.json["stoker"].value("decode_threads", 0));
}

}  // namespace

absl::StatusOr<TraceMergeSummary> MergeTrace(const std::string& dir, const std::string& out) {
  TraceMergeSummary summary;
  summary.path = out.empty() ? absl::StrCat(dir, "/", kMergedTraceName) : out;
  ASSIGN_OR_RETURN(std::vector<std::string> paths, TraceFiles(dir, summary.path));
  std::vector<TraceFile> files;
  for (const std::string& path : paths) {
    std::string damage;
    absl::StatusOr<TraceFile> file = ReadTraceFile(path, &damage);
    if (!damage.empty()) summary.damaged_files.push_back(damage);
    if (absl::IsDataLoss(file.status())) continue;  // Note [Damaged trace files]
    if (!file.ok()) return file.status();
    files.push_back(std::move(*file));
  }
  if (files.empty()) {
    return absl::DataLossError(absl::StrCat("trace merge: no usable trace in ", dir, ": ",
                                            absl::StrJoin(summary.damaged_files, "; ")));
  }
  // Each node's clock: that of its rank with the smallest error.
  std::map<int, const ClockMap*> node_clock;
  for (const TraceFile& file : files) {
    if (file.kind != "rank" || !file.clock.measured) continue;
    auto [it, inserted] = node_clock.emplace(file.node, &file.clock);
    if (!inserted && file.clock.error_us < it->second->error_us) it->second = &file.clock;
  }
  int64_t origin = std::numeric_limits<int64_t>::max();
  Json processes = Json::array();
  for (TraceFile& file : files) {
    ClockMap clock = file.clock;
    if (file.kind == "data_service") {
      auto it = node_clock.find(file.node);
      if (it != node_clock.end()) {
        clock = *it->second;
      } else {
        LogWarning("trace merge: no rank of node %d traced; %s stays on its own clock", file.node,
                   file.path);
      }
      ++summary.data_services;
      summary.data_service_lines.push_back(DataServiceLine(file));
    } else {
      ++summary.ranks;
    }
    summary.max_clock_error_us = std::max(summary.max_clock_error_us, clock.error_us);
    // Both ends of a slice go through the same monotone map, so slices that nested or
    // followed each other on a thread still do.
    auto on_rank0 = [&clock](int64_t t) { return t + clock.OffsetAt(t); };
    for (Json& event : file.json["traceEvents"]) {
      if (!event.contains("ts")) continue;
      const int64_t ts = event["ts"].get<int64_t>();
      const int64_t moved = on_rank0(ts);
      if (event.contains("dur")) event["dur"] = on_rank0(ts + event["dur"].get<int64_t>()) - moved;
      event["ts"] = moved;
      origin = std::min(origin, moved);
    }
    Json process = file.json["stoker"];
    process["file"] = file.path;
    process["clock_offset_us"] = {{"start", clock.offset_start}, {"end", clock.offset_end}};
    process["clock_error_us"] = clock.error_us;
    processes.push_back(std::move(process));
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  // A flow needs both ends: one whose other end fell outside the other process's window
  // (a batch decoded ahead of the window, a synthetic batch) is left out.
  std::map<std::pair<std::string, uint64_t>, int> flow_ends;
  auto flow_key = [](const Json& event) {
    return std::make_pair(event.value("name", ""), event.value("id", uint64_t{0}));
  };
  for (const TraceFile& file : files) {
    for (const Json& event : file.json["traceEvents"]) {
      const std::string ph = event.value("ph", "");
      if (ph == "s") flow_ends[flow_key(event)] |= 1;
      if (ph == "f") flow_ends[flow_key(event)] |= 2;
    }
  }
  Json events = Json::array();
  for (TraceFile& file : files) {
    for (Json& event : file.json["traceEvents"]) {
      const std::string ph = event.value("ph", "");
      if ((ph == "s" || ph == "f") && flow_ends[flow_key(event)] != 3) {
        ++summary.unpaired_flows;
        continue;
      }
      if (event.contains("ts")) event["ts"] = event["ts"].get<int64_t>() - origin;
      events.push_back(std::move(event));
    }
  }
  summary.events = static_cast<int64_t>(events.size());
  Json merged;
  merged["traceEvents"] = std::move(events);
  merged["displayTimeUnit"] = "ms";
  merged["stoker"] = {{"clock", "rank 0's CLOCK_MONOTONIC, from the job's first event"},
                      {"origin_us", origin},
                      {"max_clock_error_us", summary.max_clock_error_us},
                      {"processes", std::move(processes)},
                      {"data_services", summary.data_service_lines},
                      {"damaged_files", summary.damaged_files}};
  RETURN_IF_ERROR(WriteFileAtomically(summary.path, merged.dump() + "\n"));
  return summary;
}

bool IsTraceCommand(const std::vector<std::string>& args) {
  return !args.empty() && args[0] == "trace";
}

int RunTraceCommand(const std::vector<std::string>& args) {
  constexpr char kUsage[] =
      "usage: launcher trace merge DIR [--out=FILE]\n"
      "  Merges the traces a job run with --trace=DIR wrote (every rank's and data service's)\n"
      "  into DIR/job_trace.json (or FILE), on rank 0's clock; Perfetto and chrome://tracing\n"
      "  open it, and tools/trace_timeline.py draws its steps.\n";
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  std::string dir, out;
  for (size_t i = 1; i < args.size(); ++i) {
    if (absl::StartsWith(args[i], "--out=")) {
      out = args[i].substr(6);
    } else if (dir.empty() && !absl::StartsWith(args[i], "-")) {
      dir = args[i];
    } else {
      dir.clear();
      break;
    }
  }
  if (args.empty() || args[0] != "merge" || dir.empty()) {
    std::fprintf(stderr, "launcher: %s", kUsage);
    return kExitUsage;
  }
  absl::StatusOr<TraceMergeSummary> merged = MergeTrace(dir, out);
  if (!merged.ok()) {
    LogError("%s", merged.status().message());
    return kExitFailure;
  }
  LogInfo(
      "merged %d rank(s) and %d data service(s), %d events, into %s (clock error at most %d "
      "us)",
      merged->ranks, merged->data_services, merged->events, merged->path,
      merged->max_clock_error_us);
  for (const std::string& line : merged->data_service_lines) LogInfo("data service %s", line);
  for (const std::string& line : merged->damaged_files) LogWarning("trace merge: %s", line);
  return kExitOk;
}

}  // namespace stoker::launcher
