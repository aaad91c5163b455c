// TensorBoardWriter: scalars in TensorBoard's event-file format, written without
// TensorFlow or protobuf: a file events.out.tfevents.<time>.<host> of TFRecords (u64
// length, masked CRC-32C of the length, data, masked CRC-32C of the data), each holding an
// Event protobuf encoded by hand (wall_time, step, and either file_version "brain.Event:2"
// in the first record or summary { value { tag, simple_value } }).
#ifndef STOKER_TRAINER_REPORT_TENSORBOARD_WRITER_H_
#define STOKER_TRAINER_REPORT_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

// Owns one event file. Thread-compatible (rank 0's training thread uses it).
//
//   ASSIGN_OR_RETURN(auto tb, TensorBoardWriter::Create("/runs/exp1"));
//   RETURN_IF_ERROR(tb->AddScalar("train/loss", 0.73, step));
class TensorBoardWriter {
 public:
  // Creates `directory` if needed and a new event file in it (a resumed run adds a file;
  // TensorBoard merges the files of a directory). Errors name the path.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Create(const std::string& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one scalar event and flushes it to the file (TensorBoard reads live files).
  // `wall_time` in seconds since the epoch; negative means now.
  absl::Status AddScalar(absl::string_view tag, double value, int64_t step, double wall_time = -1);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(const std::string& data);

  std::string path_;
  std::FILE* file_;
};

namespace internal {
// The encoded Event messages (exposed for tests).
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarEvent(absl::string_view tag, float value, int64_t step, double wall_time);
// A TFRecord framing `data`.
std::string FrameRecord(const std::string& data);
}  // namespace internal

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_TENSORBOARD_WRITER_H_
