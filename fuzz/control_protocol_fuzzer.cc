// libFuzzer target for the data service's control protocol: whatever bytes arrive as one
// packet on the control socket, ReceiveMessage() either returns a validated message or an
// error status, and a validated message's fields can be read back (text, ring request,
// error status) and turned into a ring layout without any undefined behaviour. Built as
// //fuzz:control_protocol_fuzzer; tools/fuzz.sh runs it under libFuzzer with ASan and UBSan.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "data_service/ring/control_protocol.h"
#include "data_service/ring/ring.h"

namespace stoker::data_service {
namespace {

// The largest packet one fuzz input is sent as: a SOCK_SEQPACKET socket pair takes at least
// this much in one datagram, and it is far more than a message (so "oversized" is covered).
constexpr size_t kMaxPacketBytes = 64 * 1024;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "control_protocol_fuzzer: %s\n", what);
  std::abort();
}

void CheckMessage(const ControlMessage& message) {
  // Validate() promised a NUL inside the text: Text() must stay within it.
  const absl::string_view text = Text(message);
  if (text.size() >= kControlTextBytes) Fail("Text() ran past the text field");
  const RingRequest request = GetRequest(message);
  if (message.type == static_cast<uint16_t>(MessageType::kError)) {
    const absl::Status status = StatusFromError(message);
    if (status.ok()) Fail("a kError message turned into an OK status");
    // Replying with it must round-trip through the same checks.
    if (!Validate(ErrorMessage(status, message.request_id)).ok()) Fail("ErrorMessage invalid");
  }
  if (message.type == static_cast<uint16_t>(MessageType::kRegister)) {
    RingGeometry geometry;
    geometry.slot_count = request.slot_count;
    geometry.batch_size = request.batch_size;
    geometry.image_size = request.image_size;
    absl::StatusOr<RingLayout> layout = RingLayout::For(geometry);
    if (layout.ok()) {
      const uint64_t images_end =
          layout->image_offset + layout->image_stride * static_cast<uint64_t>(request.slot_count);
      if (layout->image_stride < layout->batch_image_bytes || images_end > layout->total_bytes) {
        Fail("a ring layout does not hold its slots");
      }
    }
  }
  // The message echoed back (as the service echoes a request) is still well-formed.
  ControlMessage echo = NewMessage(MessageType::kRegistered, message.request_id);
  SetRequest(request, &echo);
  SetText(&echo, text);
  if (!Validate(echo).ok()) Fail("an echoed request is not a valid message");
}

}  // namespace
}  // namespace stoker::data_service

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::data_service;
  if (size > kMaxPacketBytes) return -1;  // not added to the corpus
  // Straight through Validate() when the input has a message's size.
  if (size == sizeof(ControlMessage)) {
    ControlMessage message;
    std::memcpy(&message, data, sizeof(message));
    if (Validate(message).ok()) CheckMessage(message);
  }
  // And as a packet on a real socket, the way the service receives it.
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) Fail("socketpair");
  int buffer = static_cast<int>(2 * kMaxPacketBytes + 4096);
  setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  const ssize_t sent = send(fds[0], data, size, MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(size)) Fail("send of the fuzz packet failed");
  absl::StatusOr<ControlMessage> received = ReceiveMessage(fds[1], absl::Seconds(1));
  if (received.ok()) {
    if (size != sizeof(ControlMessage)) Fail("a packet of the wrong size was accepted");
    CheckMessage(*received);
  } else if (received.status().code() != absl::StatusCode::kInvalidArgument &&
             !(size == 0 && received.status().code() == absl::StatusCode::kUnavailable)) {
    // An empty packet reads like an orderly close (recvmsg returns 0) on SOCK_SEQPACKET.
    std::fprintf(stderr, "%s\n", received.status().ToString().c_str());
    Fail("a packet gave an error other than InvalidArgument");
  }
  // The connection is then closed: the next read says so.
  close(fds[0]);
  absl::StatusOr<ControlMessage> after = ReceiveMessage(fds[1], absl::Seconds(1));
  if (after.ok() || after.status().code() != absl::StatusCode::kUnavailable) {
    Fail("a closed peer did not read as Unavailable");
  }
  close(fds[1]);
  return 0;
}
