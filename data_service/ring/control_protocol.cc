#include "data_service/ring/control_protocol.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"

namespace stoker::data_service {

ControlMessage NewMessage(MessageType type, uint32_t request_id) {
  ControlMessage message;
  std::memset(&message, 0, sizeof(message));
  message.magic = kControlMagic;
  message.version = kControlVersion;
  message.type = static_cast<uint16_t>(type);
  message.request_id = request_id;
  return message;
}

ControlMessage ErrorMessage(const absl::Status& status, uint32_t request_id) {
  ControlMessage message = NewMessage(MessageType::kError, request_id);
  message.status_code =
      static_cast<int32_t>(status.ok() ? absl::StatusCode::kUnknown : status.code());
  SetText(&message, status.message());
  return message;
}

absl::Status StatusFromError(const ControlMessage& message) {
  int32_t code = message.status_code;
  if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), Text(message));
}

void SetText(ControlMessage* message, absl::string_view text) {
  const size_t length = std::min(text.size(), kControlTextBytes - 1);
  // An empty string_view may have a null data(), which memcpy must not get even for 0 bytes
  // (found by fuzz/control_protocol_fuzzer.cc: ErrorMessage() of a status without a message).
  if (length > 0) std::memcpy(message->text, text.data(), length);
  std::memset(message->text + length, 0, kControlTextBytes - length);
}

absl::string_view Text(const ControlMessage& message) {
  return absl::string_view(message.text, strnlen(message.text, kControlTextBytes));
}

void SetRequest(const RingRequest& request, ControlMessage* message) {
  message->rank = request.rank;
  message->world_size = request.world_size;
  message->batch_size = request.batch_size;
  message->image_size = request.image_size;
  message->slot_count = request.slot_count;
  message->train = request.train ? 1 : 0;
  message->drop_last = request.drop_last ? 1 : 0;
  message->num_classes = request.num_classes;
  message->gpu_decode_arena_bytes = request.gpu_decode_arena_bytes;
}

RingRequest GetRequest(const ControlMessage& message) {
  RingRequest request;
  request.rank = message.rank;
  request.world_size = message.world_size;
  request.batch_size = message.batch_size;
  request.image_size = message.image_size;
  request.slot_count = message.slot_count;
  request.train = message.train != 0;
  request.drop_last = message.drop_last != 0;
  request.num_classes = message.num_classes;
  request.gpu_decode_arena_bytes = message.gpu_decode_arena_bytes;
  return request;
}

absl::Status Validate(const ControlMessage& message) {
  if (message.magic != kControlMagic) {
    return absl::InvalidArgumentError("control message has a bad magic number");
  }
  if (message.version != kControlVersion) {
    return absl::InvalidArgumentError(absl::StrCat("control protocol version ", message.version,
                                                   " is not supported (this build speaks ",
                                                   kControlVersion, ")"));
  }
  if (message.type < static_cast<uint16_t>(MessageType::kRegister) ||
      message.type > static_cast<uint16_t>(MessageType::kBadSampleCounted)) {
    return absl::InvalidArgumentError(
        absl::StrCat("control message has an unknown type ", message.type));
  }
  if (message.train > 1 || message.drop_last > 1) {
    return absl::InvalidArgumentError("control message has a boolean that is not 0 or 1");
  }
  if (strnlen(message.text, kControlTextBytes) == kControlTextBytes) {
    return absl::InvalidArgumentError("control message text is not NUL-terminated");
  }
  return absl::OkStatus();
}

absl::Status SendMessage(int fd, const ControlMessage& message) {
  while (true) {
    const ssize_t sent = send(fd, &message, sizeof(message), MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(sizeof(message))) return absl::OkStatus();
    if (sent >= 0) return absl::InternalError("control message was sent only in part");
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
      return absl::UnavailableError("control connection closed by the peer");
    }
    return ErrnoToStatus(errno, "send control message");
  }
}

absl::StatusOr<ControlMessage> ReceiveMessage(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    const int ready =
        poll(&p, 1,
             static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "poll control socket");
    }
    if (ready == 0) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("no control message within ", absl::FormatDuration(timeout)));
      }
      continue;
    }
    break;
  }
  // One byte more than a message, so that an oversized packet shows as such even where
  // MSG_TRUNC does not make recvmsg() return a packet's full length.
  alignas(ControlMessage) unsigned char buffer[sizeof(ControlMessage) + 1];
  iovec io{buffer, sizeof(buffer)};
  msghdr header;
  std::memset(&header, 0, sizeof(header));
  header.msg_iov = &io;
  header.msg_iovlen = 1;
  ssize_t got;
  do {
    got = recvmsg(fd, &header, MSG_DONTWAIT | MSG_TRUNC);  // the rest of a long packet is dropped
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == ECONNRESET) return absl::UnavailableError("control connection reset by the peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError("no control message available");
    }
    return ErrnoToStatus(errno, "receive control message");
  }
  if (got == 0) return absl::UnavailableError("control connection closed by the peer");
  if (got != static_cast<ssize_t>(sizeof(ControlMessage)) || (header.msg_flags & MSG_TRUNC)) {
    // With MSG_TRUNC, `got` is the packet's full length (Linux AF_UNIX since 4.x).
    const bool at_least =
        got <= static_cast<ssize_t>(sizeof(ControlMessage)) && (header.msg_flags & MSG_TRUNC);
    return absl::InvalidArgumentError(
        absl::StrCat("control packet of ", at_least ? "more than " : "", got,
                     " bytes; a message is ", sizeof(ControlMessage)));
  }
  ControlMessage message;
  std::memcpy(&message, buffer, sizeof(message));
  if (absl::Status s = Validate(message); !s.ok()) return s;
  return message;
}

}  // namespace stoker::data_service
