#include "trainer/report/progress.h"

#include <errno.h>
#include <unistd.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/logging.h"

namespace stoker::trainer {

std::string FormatEta(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatProgressLine(const ProgressSnapshot& p) {
  std::string line =
      absl::StrFormat("epoch %d/%d  step %d/%d  loss %.4f  lr %.4g  %.0f img/s  data %.1f%%",
                      p.epoch, p.epochs, p.step, p.steps_per_epoch, p.loss, p.learning_rate,
                      p.images_per_second, 100.0 * p.data_wait_share);
  if (p.gpu_input_wait_share >= 0) {
    absl::StrAppend(&line, absl::StrFormat("  gpu-wait %.1f%%", 100.0 * p.gpu_input_wait_share));
  }
  if (p.gpu_decode_share >= 0) {
    absl::StrAppend(&line, absl::StrFormat("  gpu-decode %.1f%%", 100.0 * p.gpu_decode_share));
  }
  if (!p.memory.empty()) absl::StrAppend(&line, "  ", p.memory);
  if (!p.bound.empty()) absl::StrAppend(&line, "  bound ", p.bound);
  if (p.eta_seconds >= 0) absl::StrAppend(&line, "  ETA ", FormatEta(p.eta_seconds));
  return line;
}

double ResidentSetGiB() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int read = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  if (read != 2) return -1;
  return static_cast<double>(resident) * sysconf(_SC_PAGESIZE) / (1024.0 * 1024 * 1024);
}

void ProgressPrinter::Update(absl::string_view line) {
  if (in_place_) {
    std::fprintf(stream_, "\r%.*s\x1b[K", static_cast<int>(line.size()), line.data());
    pending_ = true;
  } else {
    std::fprintf(stream_, "%.*s\n", static_cast<int>(line.size()), line.data());
  }
  std::fflush(stream_);
}

void ProgressPrinter::Finish() {
  if (pending_) {
    std::fputc('\n', stream_);
    std::fflush(stream_);
    pending_ = false;
  }
}

namespace {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const absl::string_view escape = WhitespaceEscape(c);
    if (!escape.empty()) {
      absl::StrAppend(&out, escape);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

JsonObject& JsonObject::Add(absl::string_view key, double value) {
  fields_.emplace_back(std::string(key),
                       std::isfinite(value) ? absl::StrFormat("%.9g", value) : "null");
  return *this;
}

JsonObject& JsonObject::Add(absl::string_view key, int64_t value) {
  fields_.emplace_back(std::string(key), absl::StrCat(value));
  return *this;
}

JsonObject& JsonObject::Add(absl::string_view key, bool value) {
  fields_.emplace_back(std::string(key), value ? "true" : "false");
  return *this;
}

JsonObject& JsonObject::Add(absl::string_view key, absl::string_view value) {
  fields_.emplace_back(std::string(key), JsonString(value));
  return *this;
}

std::string JsonObject::Build() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out += ", ";
    absl::StrAppend(&out, JsonString(fields_[i].first), ": ", fields_[i].second);
  }
  return out + "}";
}

absl::StatusOr<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) return ErrnoToStatus(errno, absl::StrCat("--metrics_jsonl: opening ", path));
  return std::unique_ptr<JsonlWriter>(new JsonlWriter(path, file));
}

JsonlWriter::~JsonlWriter() { std::fclose(file_); }

absl::Status JsonlWriter::Write(const JsonObject& object) {
  const std::string line = object.Build() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("writing metrics to ", path_));
  }
  return absl::OkStatus();
}

}  // namespace stoker::trainer
