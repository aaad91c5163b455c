// How a rank communicates: the gradient bucket size and the collectives' deadlines (Note
// [Collective deadline] in trainer/comm/collective_watchdog.h), with their check. Free of
// libtorch.
#ifndef STOKER_TRAINER_COMM_COMM_OPTIONS_H_
#define STOKER_TRAINER_COMM_COMM_OPTIONS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::trainer {

struct CommOptions {
  int bucket_mb = 25;  // gradient bucket size in MiB, in [1, 4096]
  // Every collective must complete within collective_timeout, or the rank reports the
  // stall and aborts; a rank whose abort has not ended it after collective_abort_grace exits.
  absl::Duration collective_timeout = absl::Seconds(300);
  absl::Duration collective_abort_grace = absl::Seconds(30);

  size_t bucket_bytes() const { return static_cast<size_t>(bucket_mb) << 20; }

  // InvalidArgument naming the flag at fault (--bucket_mb, --collective_timeout_s, ...).
  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_COMM_OPTIONS_H_
