// EvalResizeSize, and the bad-sample mark of Load() errors.
#include "data_service/dataset/dataset.h"

#include <cmath>

#include "absl/strings/cord.h"

namespace stoker::data_service {
namespace {

constexpr char kBadSampleTypeUrl[] = "type.stoker/data_service.BadSample";

}  // namespace

int32_t EvalResizeSize(int32_t image_size, double ratio) {
  return static_cast<int32_t>(std::lround(static_cast<double>(image_size) * ratio));
}

absl::StatusOr<absl::Span<const uint8_t>> Dataset::ReadEncoded(int64_t, SampleScratch&) const {
  return absl::UnimplementedError("this dataset has no encoded form");
}

bool IsBadSampleError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kBadSampleTypeUrl).has_value();
}

absl::Status MarkBadSample(absl::Status status) {
  if (!status.ok()) status.SetPayload(kBadSampleTypeUrl, absl::Cord("1"));
  return status;
}

}  // namespace stoker::data_service
