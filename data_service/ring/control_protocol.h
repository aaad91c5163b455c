// The control protocol between a RingClient (trainer) and the data service, over a Unix
// SOCK_SEQPACKET socket: one fixed-size, trivially copyable ControlMessage
// (data_service/ring/wire_types.h) per packet.
//
//   client -> service   kRegister     RingRequest           -> kRegistered (segment, geometry,
//                                                            dataset size)
//   client -> service   kStartEpoch   epoch, seed, start    -> kEpochStarted (EpochInfo)
//   client -> service   kBadSample    epoch, sample_index,  -> kBadSampleCounted (the sample's
//                                       why                    file), or kError when the
//                                                            bad-data policy stops the run
//   service -> client   kError        code, text            (a reply, or with request_id 0
//                                                            an asynchronous production error)
// Every reply carries the request_id of its request. A malformed packet (wrong size,
// magic, version, type, or unterminated text) is rejected without being interpreted.
#ifndef STOKER_DATA_SERVICE_RING_CONTROL_PROTOCOL_H_
#define STOKER_DATA_SERVICE_RING_CONTROL_PROTOCOL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data_service/ring/wire_types.h"

namespace stoker::data_service {

// A zeroed message of `type` with magic and version set.
ControlMessage NewMessage(MessageType type, uint32_t request_id);
// A kError reply carrying `status` (which must not be OK).
ControlMessage ErrorMessage(const absl::Status& status, uint32_t request_id);
// The status a kError message carries (Unknown if its code is out of range).
absl::Status StatusFromError(const ControlMessage& message);

// Stores `text` in message->text, truncated to fit with its terminating NUL.
void SetText(ControlMessage* message, absl::string_view text);
// The text up to its NUL (Validate() guarantees there is one).
absl::string_view Text(const ControlMessage& message);

void SetRequest(const RingRequest& request, ControlMessage* message);
RingRequest GetRequest(const ControlMessage& message);

// InvalidArgument unless magic, version, type, flags and text are well-formed.
absl::Status Validate(const ControlMessage& message);

// Sends one message (never raises SIGPIPE). Unavailable if the peer is gone.
absl::Status SendMessage(int fd, const ControlMessage& message);

// Waits at most `timeout` (zero: only check) for one packet and returns it validated.
// Unavailable if the peer closed the connection; DeadlineExceeded if nothing came;
// InvalidArgument for a malformed packet (which is consumed).
absl::StatusOr<ControlMessage> ReceiveMessage(int fd, absl::Duration timeout);

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_RING_CONTROL_PROTOCOL_H_
