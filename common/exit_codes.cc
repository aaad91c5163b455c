#include "common/exit_codes.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace stoker {
namespace {

constexpr char kExitCodePayload[] = "type.stoker/exit_code";
constexpr char kPeerFailurePayload[] = "type.stoker/peer_failure";

}  // namespace

absl::Status WithExitCode(absl::Status status, int exit_code) {
  if (status.ok()) return status;
  status.SetPayload(kExitCodePayload, absl::Cord(absl::StrCat(exit_code)));
  return status;
}

int ExitCodeOf(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (absl::optional<absl::Cord> tag = status.GetPayload(kExitCodePayload)) {
    int code = 0;
    if (absl::SimpleAtoi(std::string(*tag), &code) && code != kExitOk) return code;
  }
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      return kExitPeerLost;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitTimeout;
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
      return kExitBadData;
    default:
      return kExitFailure;
  }
}

std::string ExitCause(int exit_code) {
  switch (exit_code) {
    case kExitOk:
      return "finished";
    case kExitUsage:
      return "bad flag or configuration";
    case kExitBadData:
      return "bad data";
    case kExitPeerLost:
      return "peer lost";
    case kExitCheckpointIo:
      return "checkpoint I/O";
    case kExitStoppedEarly:
      return "stopped early (resumable)";
    case kExitTimeout:
      return "timeout";
    default:
      break;
  }
  if (exit_code > 128 && exit_code < 128 + 65) {
    return absl::StrCat("stopped by signal ", exit_code - 128, " (resumable)");
  }
  return "failure";
}

std::string StatusText(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

absl::Status AsPeerFailure(absl::Status status) {
  if (!status.ok()) status.SetPayload(kPeerFailurePayload, absl::Cord("1"));
  return status;
}

int ReportFailure(const absl::Status& status) {
  const int code = ExitCodeOf(status);
  if (status.GetPayload(kPeerFailurePayload).has_value()) {
    LogWarning("%s (exit %d): %s", ExitCause(code), code, StatusText(status));
  } else {
    LogError("%s (exit %d): %s", ExitCause(code), code, StatusText(status));
  }
  return code;
}

}  // namespace stoker
