#include "data_service/ring/ring_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/exit_codes.h"
#include "common/shm_segment.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "data_service/ring/control_protocol.h"
#include "data_service/ring/ring.h"

namespace stoker::data_service {
namespace {

// Acquire waits on the ring in slices this long, looking at the control socket in
// between, so that a dead service is noticed within a slice.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

// Note [Whose fault a ring error is]
// The exit code of a ring error tells a scheduler whom to blame (common/exit_codes.h):
//  - a ring the service refused because the node lacks room for it (/dev/shm, the
//    service's --max_memory, its connections) or because its name is taken (another
//    service of the job, another user's segment squatting the name): a configuration
//    fault, kExitUsage; a dataset with more classes than --num_classes stays bad data;
//  - a ring whose header or slot breaks its format (a bad magic, an inconsistent slot, a
//    label outside --num_classes; Note [Slot contents are checked]): the data service
//    wrote the slot after checking its labels against --num_classes at registration, so
//    another process changed the memory; a peer is at fault, kExitPeerLost, not the
//    dataset.
absl::Status RefusalExitCode(absl::Status refusal, absl::StatusCode service_code) {
  const bool node_lacks_room = service_code == absl::StatusCode::kResourceExhausted ||
                               service_code == absl::StatusCode::kAlreadyExists;
  return node_lacks_room ? WithExitCode(std::move(refusal), kExitUsage) : refusal;
}

absl::Status CorruptRing(absl::Status status) {
  return WithExitCode(std::move(status), kExitPeerLost);
}

absl::StatusOr<UniqueFd> ConnectSocket(const std::string& path, absl::Time deadline) {
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(path);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data service socket: ", address.status().message()));
  }
  while (true) {
    UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoToStatus(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
    const int error = ConnectUnixSocket(fd.get(), *address);
    if (error == 0) return fd;
    // Not there yet (or its backlog is full): the service may still be starting.
    const bool retry =
        error == ENOENT || error == ECONNREFUSED || error == EAGAIN || error == EINTR;
    if (!retry) return ErrnoToStatus(error, absl::StrCat("connect to data service at ", path));
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(
          absl::StrCat("no data service at ", path, " (", std::strerror(error), ")"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// Note [Slot contents are checked]
// The ring is memory another process writes, so what a slot says is checked before the
// trainer uses it: RingConsumer checks the slot's count and position, and this checks its
// labels (in [0, --num_classes), so that no label reaches a device-side assert) and sample
// indices (not negative), and the header of every deferred sample (its magic and version,
// a JPEG that fits in the sample's place, an output size equal to the ring's). A
// violation is OutOfRange and fatal for the ring.
absl::Status CheckSlotContents(const RingRequest& request, const ReadableSlot& slot) {
  for (int32_t i = 0; i < slot.count; ++i) {
    const int32_t label = slot.labels[i];
    const bool label_ok = label >= 0 && (request.num_classes <= 0 || label < request.num_classes);
    if (!label_ok || slot.sample_indices[i] < 0) {
      return absl::OutOfRangeError(
          absl::StrCat("rank ", request.rank, ": ring slot ", slot.slot, " (epoch ", slot.epoch,
                       ", step ", slot.step, ") holds label ", label, " for sample index ",
                       slot.sample_indices[i], " at position ", i, "; labels must be in [0, ",
                       request.num_classes, ") (--num_classes) and indices not negative"));
    }
  }
  if (slot.deferred_count == 0) return absl::OkStatus();
  const size_t sample_bytes = static_cast<size_t>(request.image_size) * request.image_size * 3;
  for (int32_t i = 0; i < slot.count; ++i) {
    if (slot.sample_kinds[i] != static_cast<uint8_t>(SampleKind::kDeferredJpeg)) continue;
    DeferredSampleHeader header;
    std::memcpy(&header, slot.images + sample_bytes * i, sizeof(header));
    if (header.magic != kDeferredMagic || header.version != kDeferredVersion ||
        header.encoded_bytes == 0 || header.encoded_bytes > sample_bytes - sizeof(header) ||
        header.x.out_size != request.image_size || header.y.out_size != request.image_size) {
      return absl::OutOfRangeError(absl::StrCat(
          "rank ", request.rank, ": ring slot ", slot.slot, " (epoch ", slot.epoch, ", step ",
          slot.step, ") has a malformed deferred sample at position ", i, " (magic ", header.magic,
          ", version ", header.version, ", ", header.encoded_bytes, " bytes)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct RingClient::State {
  std::string socket_path;
  RingRequest request;
  // How long a call waits for the service's reply: Connect's timeout.
  absl::Duration reply_timeout;
  UniqueFd control;
  SharedMemorySegment segment;
  RingConsumer consumer;
  uint32_t next_request_id = 1;
  int64_t last_epoch = -1;
  int64_t batches_requested = 0;
  int64_t batches_acquired = 0;
  // Once the service is gone or reported a production error, every call returns this.
  absl::Status fatal;

  State(std::string path, const RingRequest& r, absl::Duration timeout, UniqueFd fd,
        SharedMemorySegment seg, RingConsumer c)
      : socket_path(std::move(path)),
        request(r),
        reply_timeout(timeout),
        control(std::move(fd)),
        segment(std::move(seg)),
        consumer(std::move(c)) {}

  // Turns what came from the control socket outside a request into the fatal status.
  absl::Status Fail(const absl::Status& status) {
    if (absl::IsUnavailable(status)) {
      fatal = absl::UnavailableError(absl::StrCat("the data service at ", socket_path,
                                                  " is gone (rank ", request.rank,
                                                  "): ", status.message()));
    } else {
      fatal = absl::Status(status.code(), absl::StrCat("data service (rank ", request.rank,
                                                       "): ", status.message()));
    }
    fatal = WithExitCode(fatal, ExitCodeOf(status));
    return fatal;
  }

  // Sends `message` and waits for the reply to it. A kError without request id (a
  // production error) or a closed connection is fatal.
  absl::StatusOr<ControlMessage> Call(ControlMessage message, absl::Duration timeout) {
    message.request_id = next_request_id++;
    if (absl::Status s = SendMessage(control.get(), message); !s.ok()) return Fail(s);
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      absl::StatusOr<ControlMessage> reply =
          ReceiveMessage(control.get(), std::max(deadline - absl::Now(), absl::ZeroDuration()));
      if (absl::IsDeadlineExceeded(reply.status())) {
        // A service that holds its connection open but does not answer is stuck (stopped,
        // hung): a lost peer.
        return WithExitCode(absl::DeadlineExceededError(absl::StrCat(
                                "the data service at ", socket_path, " did not answer within ",
                                absl::FormatDuration(timeout), " (stopped or hung)")),
                            kExitPeerLost);
      }
      if (!reply.ok()) return Fail(reply.status());
      if (reply->request_id == message.request_id) return *reply;
      if (reply->type == static_cast<uint16_t>(MessageType::kError)) {
        return Fail(StatusFromError(*reply));
      }
      // A stale reply to an earlier request that timed out: skip it.
    }
  }
};

absl::StatusOr<std::unique_ptr<RingClient>> RingClient::Connect(const std::string& socket_path,
                                                                const RingRequest& request,
                                                                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<UniqueFd> control = ConnectSocket(socket_path, deadline);
  if (!control.ok()) return control.status();

  ControlMessage message = NewMessage(MessageType::kRegister, 1);
  SetRequest(request, &message);
  absl::StatusOr<ControlMessage> reply;
  if (absl::Status s = SendMessage(control->get(), message); !s.ok()) {
    // The service may have refused the connection (another uid, too many clients) and
    // closed it already: its reason is then waiting to be read.
    reply = ReceiveMessage(control->get(), absl::ZeroDuration());
    if (!reply.ok()) {
      return absl::UnavailableError(
          absl::StrCat("data service at ", socket_path, " closed the connection: ", s.message()));
    }
  } else {
    reply = ReceiveMessage(control->get(), std::max(deadline - absl::Now(), absl::Seconds(1)));
  }
  if (!reply.ok()) {
    return absl::UnavailableError(absl::StrCat("data service at ", socket_path,
                                               " did not register rank ", request.rank, ": ",
                                               reply.status().message()));
  }
  if (reply->type == static_cast<uint16_t>(MessageType::kError)) {
    // A refused request is InvalidArgument (whatever the reason: a bad field, no room in
    // /dev/shm, the rank already registered); a refused user stays PermissionDenied, and
    // a dataset with more classes than RingRequest::num_classes stays OutOfRange.
    // Its exit code: Note [Whose fault a ring error is].
    const absl::Status refusal = StatusFromError(*reply);
    const absl::StatusCode code = absl::IsPermissionDenied(refusal) || absl::IsOutOfRange(refusal)
                                      ? refusal.code()
                                      : absl::StatusCode::kInvalidArgument;
    return RefusalExitCode(absl::Status(code, absl::StrCat("data service at ", socket_path,
                                                           " refused the ring request of rank ",
                                                           request.rank, ": ", Text(*reply))),
                           refusal.code());
  }
  if (reply->type != static_cast<uint16_t>(MessageType::kRegistered) || reply->request_id != 1) {
    return absl::InternalError(absl::StrCat("data service at ", socket_path,
                                            " answered the registration with message type ",
                                            reply->type));
  }
  const RingRequest granted = GetRequest(*reply);
  if (granted.rank != request.rank || granted.batch_size != request.batch_size ||
      granted.image_size != request.image_size || granted.slot_count != request.slot_count) {
    return absl::InternalError("data service granted a ring of another geometry");
  }
  const std::string segment_name(Text(*reply));
  absl::StatusOr<SharedMemorySegment> segment = SharedMemorySegment::Open(segment_name);
  if (!segment.ok()) return segment.status();
  if (segment->size() != reply->ring_bytes) {
    return absl::InternalError(absl::StrCat("ring ", segment_name, " has ", segment->size(),
                                            " bytes, the service said ", reply->ring_bytes));
  }
  absl::StatusOr<RingConsumer> consumer = RingConsumer::Attach(segment->data(), segment->size());
  if (!consumer.ok()) return CorruptRing(consumer.status());
  const RingGeometry& geometry = consumer->layout().geometry;
  if (geometry.batch_size != request.batch_size || geometry.image_size != request.image_size ||
      geometry.slot_count != request.slot_count) {
    return absl::InternalError(
        absl::StrCat("ring ", segment_name, " does not have the requested geometry"));
  }
  consumer->RequestGpuDecodeShare(request.gpu_decode_share);
  return std::unique_ptr<RingClient>(
      new RingClient(std::make_unique<State>(socket_path, request, timeout, std::move(*control),
                                             std::move(*segment), std::move(*consumer))));
}

RingClient::RingClient(std::unique_ptr<State> state) : state_(std::move(state)) {}

RingClient::~RingClient() = default;

absl::StatusOr<EpochInfo> RingClient::StartEpoch(int64_t epoch, uint64_t seed) {
  State& s = *state_;
  if (!s.fatal.ok()) return s.fatal;
  if (epoch <= s.last_epoch) {
    return absl::FailedPreconditionError(absl::StrCat("StartEpoch(", epoch, ") after StartEpoch(",
                                                      s.last_epoch, "): epochs must increase"));
  }
  ControlMessage message = NewMessage(MessageType::kStartEpoch, 0);
  message.epoch = epoch;
  message.seed = seed;
  absl::StatusOr<ControlMessage> reply = s.Call(message, s.reply_timeout);
  if (!reply.ok()) return reply.status();
  if (reply->type == static_cast<uint16_t>(MessageType::kError)) {
    return StatusFromError(*reply);
  }
  if (reply->type != static_cast<uint16_t>(MessageType::kEpochStarted) || reply->epoch != epoch ||
      reply->samples < 0 || reply->batches < 0) {
    return absl::InternalError(absl::StrCat("unexpected answer to StartEpoch(", epoch, ")"));
  }
  s.last_epoch = epoch;
  s.batches_requested += reply->batches;
  EpochInfo info;
  info.epoch = reply->epoch;
  info.samples = reply->samples;
  info.batches = reply->batches;
  return info;
}

absl::StatusOr<BatchView> RingClient::Acquire(absl::Duration timeout) {
  State& s = *state_;
  if (!s.fatal.ok()) return s.fatal;
  if (s.batches_acquired >= s.batches_requested) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", s.request.rank, " acquired every batch of the epochs it started (",
                     s.batches_requested, "): call StartEpoch first"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    absl::StatusOr<ReadableSlot> slot = s.consumer.Acquire(std::min(left, kWaitSlice));
    if (slot.ok()) {
      if (absl::Status checked = CheckSlotContents(s.request, *slot); !checked.ok()) {
        return s.Fail(CorruptRing(checked));
      }
      ++s.batches_acquired;
      BatchView view;
      view.slot = slot->slot;
      view.epoch = slot->epoch;
      view.step = slot->step;
      view.count = slot->count;
      view.images = slot->images;
      view.labels = slot->labels;
      view.sample_indices = slot->sample_indices;
      view.sample_kinds = slot->sample_kinds;
      view.deferred_count = slot->deferred_count;
      view.gpu_decode_share = slot->gpu_decode_share;
      return view;
    }
    if (absl::IsDataLoss(slot.status())) return CorruptRing(slot.status());
    if (!absl::IsDeadlineExceeded(slot.status())) return slot.status();
    // Nothing yet: is the service still there? (EOF, or an asynchronous error report.)
    pollfd p{s.control.get(), POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {
      absl::StatusOr<ControlMessage> message =
          ReceiveMessage(s.control.get(), absl::ZeroDuration());
      if (!message.ok()) {
        if (!absl::IsDeadlineExceeded(message.status())) return s.Fail(message.status());
      } else if (message->type == static_cast<uint16_t>(MessageType::kError)) {
        return s.Fail(StatusFromError(*message));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", s.request.rank, ": no batch from the data service within ",
                       absl::FormatDuration(timeout), " (", s.batches_acquired, " of ",
                       s.batches_requested, " batches acquired)"));
    }
  }
}

absl::Status RingClient::Release(const BatchView& batch) {
  return state_->consumer.Release(batch.slot);
}

void RingClient::RequestGpuDecodeShare(double share) {
  state_->consumer.RequestGpuDecodeShare(share);
}

void* RingClient::ring_base() const { return state_->segment.data(); }
size_t RingClient::ring_bytes() const { return state_->segment.size(); }
const RingRequest& RingClient::request() const { return state_->request; }

}  // namespace stoker::data_service
