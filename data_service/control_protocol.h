// The control protocol between a RingClient (trainer) and the data service, over a Unix
// SOCK_SEQPACKET socket: one fixed-size, trivially copyable ControlMessage per packet.
//
//   client -> service   kRegister     RingRequest           -> kRegistered (segment, geometry)
//   client -> service   kStartEpoch   epoch, seed           -> kEpochStarted (EpochInfo)
//   service -> client   kError        code, text            (a reply, or with request_id 0
//                                                            an asynchronous production error)
// Every reply carries the request_id of its request. A malformed packet (wrong size,
// magic, version, type, or unterminated text) is rejected without being interpreted.
#ifndef STOKER_DATA_SERVICE_CONTROL_PROTOCOL_H_
#define STOKER_DATA_SERVICE_CONTROL_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data_service/ring_client.h"

namespace stoker::data_service {

inline constexpr uint32_t kControlMagic = 0x4c435453;  // "STCL", little-endian
inline constexpr uint16_t kControlVersion = 1;
inline constexpr size_t kControlTextBytes = 256;

enum class MessageType : uint16_t {
  kRegister = 1,
  kRegistered = 2,
  kStartEpoch = 3,
  kEpochStarted = 4,
  kError = 5,
};

// One packet. Fields not used by a type are zero.
struct ControlMessage {
  uint32_t magic;
  uint16_t version;
  uint16_t type;         // MessageType
  uint32_t request_id;   // echoed by the reply; 0 in an asynchronous kError
  int32_t status_code;   // kError: an absl::StatusCode
  // kRegister (and echoed by kRegistered): the RingRequest.
  int32_t rank;
  int32_t world_size;
  int32_t batch_size;
  int32_t image_size;
  int32_t slot_count;
  uint8_t train;
  uint8_t drop_last;
  uint8_t reserved0[2];
  // kStartEpoch: epoch, seed. kEpochStarted: epoch, samples, batches.
  int64_t epoch;
  uint64_t seed;
  int64_t samples;
  int64_t batches;
  // kRegistered: the size of the ring segment named in `text`.
  uint64_t ring_bytes;
  // kRegistered: the shared-memory segment name. kError: the message. NUL-terminated.
  char text[kControlTextBytes];
};
static_assert(std::is_trivially_copyable_v<ControlMessage>);
static_assert(sizeof(ControlMessage) == 336, "ControlMessage is the wire format");

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

#endif  // STOKER_DATA_SERVICE_CONTROL_PROTOCOL_H_
