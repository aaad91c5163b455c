#include "trainer/report/tensorboard_writer.h"

#include <errno.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/atomic_file.h"
#include "common/crc32c.h"
#include "common/errno_status.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace internal {
namespace {

// Protobuf wire format: key = field << 3 | wire type (0 varint, 1 fixed64, 2 length
// delimited, 5 fixed32).
void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void Key(std::string& out, int field, int wire_type) { Varint(out, (field << 3) | wire_type); }
template <typename T>
void Fixed(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void Bytes(std::string& out, int field, absl::string_view bytes) {
  Key(out, field, 2);
  Varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
void EventHeader(std::string& out, double wall_time, int64_t step) {
  Key(out, 1, 1);  // Event.wall_time: double
  Fixed<double>(out, wall_time);
  if (step != 0) {
    Key(out, 2, 0);  // Event.step: int64
    Varint(out, static_cast<uint64_t>(step));
  }
}

}  // namespace

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event;
  EventHeader(event, wall_time, 0);
  Bytes(event, 3, "brain.Event:2");  // Event.file_version
  return event;
}

std::string EncodeScalarEvent(absl::string_view tag, float value, int64_t step, double wall_time) {
  std::string summary_value;
  Bytes(summary_value, 1, tag);  // Summary.Value.tag
  Key(summary_value, 2, 5);      // Summary.Value.simple_value: float
  Fixed<float>(summary_value, value);
  std::string summary;
  Bytes(summary, 1, summary_value);  // Summary.value
  std::string event;
  EventHeader(event, wall_time, step);
  Bytes(event, 5, summary);  // Event.summary
  return event;
}

std::string FrameRecord(const std::string& data) {
  std::string record;
  const uint64_t length = data.size();
  Fixed<uint64_t>(record, length);
  Fixed<uint32_t>(record, MaskCrc32c(Crc32cExtend(0, &length, sizeof(length))));
  record += data;
  Fixed<uint32_t>(record, MaskCrc32c(Crc32c(data)));
  return record;
}

}  // namespace internal

namespace {
double Now() { return absl::ToUnixMicros(absl::Now()) / 1e6; }
}  // namespace

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(
    const std::string& directory) {
  RETURN_IF_ERROR(MakeDirectories(directory, 0755));  // for TensorBoard, maybe another user's
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = Now();
  // Same second and host as an earlier file (a quick restart): add the pid.
  std::string path =
      absl::StrCat(directory, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host);
  if (access(path.c_str(), F_OK) == 0) absl::StrAppend(&path, ".", getpid());
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr)
    return ErrnoToStatus(errno, absl::StrCat("--tensorboard_dir: creating ", path));
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  RETURN_IF_ERROR(writer->WriteRecord(internal::EncodeFileVersionEvent(now)));
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::WriteRecord(const std::string& data) {
  const std::string record = internal::FrameRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("writing TensorBoard events to ", path_));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::AddScalar(absl::string_view tag, double value, int64_t step,
                                          double wall_time) {
  return WriteRecord(internal::EncodeScalarEvent(tag, static_cast<float>(value), step,
                                                 wall_time < 0 ? Now() : wall_time));
}

}  // namespace stoker::trainer
