#include "data_service/ring/ring_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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
// The ring is memory another process writes, and may rewrite at any time, so what a slot
// says is copied once into the client's own memory, checked there, and only the copy is
// used: RingConsumer copies the slot's count and position, and this copies its labels,
// sample indices, sample kinds and the header of every deferred sample, then checks the
// copies: labels in [0, --num_classes) (so that no label reaches a device-side assert),
// indices not negative, kinds known and as many deferred as the metadata says, and each
// deferred header's magic and version, a JPEG that fits in the sample's place, an output
// size equal to the ring's, a full size whose decode fits the GPU decode arena and axes
// that read only pixels of it. The BatchView hands out the copies; only the pixels (and a
// deferred sample's JPEG bytes, which the GPU decoder copies once more into its own
// memory before nvJPEG reads them) are read from the ring. A violation is OutOfRange and
// fatal for the ring.

// Whether one axis of a deferred header reads only pixels of a `size`-pixel image.
bool AxisInside(const DeferredAxis& axis, int32_t size) {
  return axis.clip_begin >= 0 && axis.clip_begin < axis.clip_end && axis.clip_end <= size &&
         axis.scale > 0.0 && axis.scale < 1e6 && axis.in0 > -1e6 && axis.in0 < 1e6 &&
         axis.out_offset >= 0 && axis.out_offset < (1 << 20);
}

}  // namespace

namespace internal {

absl::Status CheckDeferredHeader(const DeferredSampleHeader& header, const RingRequest& request) {
  const size_t sample_bytes = static_cast<size_t>(request.image_size) * request.image_size * 3;
  const uint64_t arena_bytes = request.gpu_decode_arena_bytes != 0 ? request.gpu_decode_arena_bytes
                                                                   : kDefaultGpuDecodeArenaBytes;
  if (header.magic != kDeferredMagic || header.version != kDeferredVersion) {
    return absl::OutOfRangeError(
        absl::StrCat("magic ", header.magic, ", version ", header.version));
  }
  if (header.encoded_bytes == 0 || sample_bytes < sizeof(header) ||
      header.encoded_bytes > sample_bytes - sizeof(header)) {
    return absl::OutOfRangeError(absl::StrCat(header.encoded_bytes, " bytes of JPEG in a place of ",
                                              sample_bytes, " bytes"));
  }
  if (header.x.out_size != request.image_size || header.y.out_size != request.image_size) {
    return absl::OutOfRangeError(absl::StrCat("output size ", header.x.out_size, "x",
                                              header.y.out_size, " in a ring of ",
                                              request.image_size));
  }
  if (header.width <= 0 || header.height <= 0 ||
      DeferredDecodedBytes(header.width, header.height) > arena_bytes) {
    return absl::OutOfRangeError(absl::StrCat("a ", header.width, "x", header.height,
                                              " image, whose decode does not fit the GPU decode "
                                              "arena of ",
                                              arena_bytes, " bytes"));
  }
  if (header.flip > 1 || header.train > 1 || !AxisInside(header.x, header.width) ||
      !AxisInside(header.y, header.height)) {
    return absl::OutOfRangeError("a crop outside the image");
  }
  return absl::OkStatus();
}

absl::Status CopySlotContents(const RingRequest& request, const ReadableSlot& slot,
                              PrivateSlot& copy) {
  const size_t n = static_cast<size_t>(slot.count);
  copy.labels.assign(slot.labels, slot.labels + n);
  copy.sample_indices.assign(slot.sample_indices, slot.sample_indices + n);
  copy.sample_kinds.assign(slot.sample_kinds, slot.sample_kinds + n);
  copy.deferred_headers.resize(n);
  copy.deferred_count = 0;
  const std::string slot_name = absl::StrCat("rank ", request.rank, ": ring slot ", slot.slot,
                                             " (epoch ", slot.epoch, ", step ", slot.step, ")");
  for (int32_t i = 0; i < slot.count; ++i) {
    const int32_t label = copy.labels[i];
    const bool label_ok = label >= 0 && (request.num_classes <= 0 || label < request.num_classes);
    if (!label_ok || copy.sample_indices[i] < 0) {
      return absl::OutOfRangeError(
          absl::StrCat(slot_name, " holds label ", label, " for sample index ",
                       copy.sample_indices[i], " at position ", i, "; labels must be in [0, ",
                       request.num_classes, ") (--num_classes) and indices not negative"));
    }
  }
  const size_t sample_bytes = static_cast<size_t>(request.image_size) * request.image_size * 3;
  for (int32_t i = 0; i < slot.count; ++i) {
    const uint8_t kind = copy.sample_kinds[i];
    if (kind == static_cast<uint8_t>(SampleKind::kPixels)) continue;
    if (kind != static_cast<uint8_t>(SampleKind::kDeferredJpeg)) {
      return absl::OutOfRangeError(
          absl::StrCat(slot_name, " holds a sample of unknown kind ", kind, " at position ", i));
    }
    ++copy.deferred_count;
    DeferredSampleHeader& header = copy.deferred_headers[i];
    std::memcpy(&header, slot.images + sample_bytes * i, sizeof(header));
    if (absl::Status s = CheckDeferredHeader(header, request); !s.ok()) {
      return absl::OutOfRangeError(absl::StrCat(
          slot_name, " has a malformed deferred sample at position ", i, ": ", s.message()));
    }
  }
  if (copy.deferred_count != slot.deferred_count) {
    return absl::OutOfRangeError(absl::StrCat(slot_name, " holds ", copy.deferred_count,
                                              " deferred samples; its metadata says ",
                                              slot.deferred_count));
  }
  return absl::OkStatus();
}

}  // namespace internal

struct RingClient::State {
  std::string socket_path;
  RingRequest request;
  // How long a call waits for the service's reply: Connect's timeout.
  absl::Duration reply_timeout;
  UniqueFd control;
  SharedMemorySegment segment;
  RingConsumer consumer;
  int64_t dataset_size = 0;
  int64_t last_epoch = -1;
  std::atomic<int64_t> batches_requested{0};  // written by StartEpoch(), read by Acquire()
  int64_t batches_acquired = 0;
  // Per slot: the copy of what it held when acquired (Note [Slot contents are checked]).
  std::vector<internal::PrivateSlot> copies;
  // Serialises the use of the control socket: the prefetch thread's ReportBadSample() and
  // its look for an asynchronous error in Acquire() against the training thread's
  // StartEpoch(), so that no call reads another's reply.
  absl::Mutex control_mu;
  uint32_t next_request_id ABSL_GUARDED_BY(control_mu) = 1;
  // Once the service is gone or reported a production error, every call returns this.
  absl::Status fatal ABSL_GUARDED_BY(control_mu);

  State(std::string path, const RingRequest& r, absl::Duration timeout, UniqueFd fd,
        SharedMemorySegment seg, RingConsumer c)
      : socket_path(std::move(path)),
        request(r),
        reply_timeout(timeout),
        control(std::move(fd)),
        segment(std::move(seg)),
        consumer(std::move(c)),
        copies(static_cast<size_t>(std::max(r.slot_count, 1))) {}

  absl::Status Fatal() {
    absl::MutexLock lock(&control_mu);
    return fatal;
  }

  // Turns what came from the control socket outside a request into the fatal status.
  absl::Status Fail(const absl::Status& status) {
    absl::MutexLock lock(&control_mu);
    return FailLocked(status);
  }
  absl::Status FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu) {
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
    absl::MutexLock lock(&control_mu);
    if (!fatal.ok()) return fatal;
    message.request_id = next_request_id++;
    if (absl::Status s = SendMessage(control.get(), message); !s.ok()) return FailLocked(s);
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
      if (!reply.ok()) return FailLocked(reply.status());
      if (reply->request_id == message.request_id) return *reply;
      if (reply->type == static_cast<uint16_t>(MessageType::kError)) {
        return FailLocked(StatusFromError(*reply));
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
  auto state = std::make_unique<State>(socket_path, request, timeout, std::move(*control),
                                       std::move(*segment), std::move(*consumer));
  state->dataset_size = reply->samples;
  return std::unique_ptr<RingClient>(new RingClient(std::move(state)));
}

RingClient::RingClient(std::unique_ptr<State> state) : state_(std::move(state)) {}

RingClient::~RingClient() = default;

absl::StatusOr<EpochInfo> RingClient::StartEpoch(int64_t epoch, uint64_t seed,
                                                 int64_t start_sample) {
  State& s = *state_;
  if (absl::Status fatal = s.Fatal(); !fatal.ok()) return fatal;
  if (epoch <= s.last_epoch) {
    return absl::FailedPreconditionError(absl::StrCat("StartEpoch(", epoch, ") after StartEpoch(",
                                                      s.last_epoch, "): epochs must increase"));
  }
  ControlMessage message = NewMessage(MessageType::kStartEpoch, 0);
  message.epoch = epoch;
  message.seed = seed;
  message.samples = start_sample;
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
  s.batches_requested.fetch_add(reply->batches);
  EpochInfo info;
  info.epoch = reply->epoch;
  info.samples = reply->samples;
  info.batches = reply->batches;
  return info;
}

absl::StatusOr<BatchView> RingClient::Acquire(absl::Duration timeout) {
  State& s = *state_;
  if (absl::Status fatal = s.Fatal(); !fatal.ok()) return fatal;
  if (s.batches_acquired >= s.batches_requested) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", s.request.rank, " acquired every batch of the epochs it started (",
                     s.batches_requested.load(), "): call StartEpoch first"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    absl::StatusOr<ReadableSlot> slot = s.consumer.Acquire(std::min(left, kWaitSlice));
    if (slot.ok()) {
      internal::PrivateSlot& copy = s.copies[slot->slot];
      if (absl::Status checked = internal::CopySlotContents(s.request, *slot, copy);
          !checked.ok()) {
        return s.Fail(CorruptRing(checked));
      }
      ++s.batches_acquired;
      BatchView view;
      view.slot = slot->slot;
      view.epoch = slot->epoch;
      view.step = slot->step;
      view.count = slot->count;
      view.images = slot->images;
      view.labels = copy.labels.data();
      view.sample_indices = copy.sample_indices.data();
      view.sample_kinds = copy.sample_kinds.data();
      view.deferred_headers = copy.deferred_headers.data();
      view.deferred_count = copy.deferred_count;
      view.gpu_decode_share = slot->gpu_decode_share;
      return view;
    }
    if (absl::IsDataLoss(slot.status())) return CorruptRing(slot.status());
    if (!absl::IsDeadlineExceeded(slot.status())) return slot.status();
    // Nothing yet: is the service still there? (EOF, or an asynchronous error report.)
    {
      absl::MutexLock lock(&s.control_mu);
      pollfd p{s.control.get(), POLLIN, 0};
      if (poll(&p, 1, 0) > 0) {
        absl::StatusOr<ControlMessage> message =
            ReceiveMessage(s.control.get(), absl::ZeroDuration());
        if (!message.ok()) {
          if (!absl::IsDeadlineExceeded(message.status())) return s.FailLocked(message.status());
        } else if (message->type == static_cast<uint16_t>(MessageType::kError)) {
          return s.FailLocked(StatusFromError(*message));
        }
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", s.request.rank, ": no batch from the data service within ",
                       absl::FormatDuration(timeout), " (", s.batches_acquired, " of ",
                       s.batches_requested.load(), " batches acquired)"));
    }
  }
}

absl::StatusOr<std::string> RingClient::ReportBadSample(int64_t epoch, int64_t sample_index,
                                                        absl::string_view why) {
  State& s = *state_;
  if (absl::Status fatal = s.Fatal(); !fatal.ok()) return fatal;
  ControlMessage message = NewMessage(MessageType::kBadSample, 0);
  message.epoch = epoch;
  message.sample_index = sample_index;
  SetText(&message, why);
  absl::StatusOr<ControlMessage> reply = s.Call(message, s.reply_timeout);
  if (!reply.ok()) return reply.status();
  if (reply->type == static_cast<uint16_t>(MessageType::kError)) {
    return s.Fail(StatusFromError(*reply));
  }
  if (reply->type != static_cast<uint16_t>(MessageType::kBadSampleCounted)) {
    return absl::InternalError(absl::StrCat("unexpected answer to the report of sample ",
                                            sample_index, ": message type ", reply->type));
  }
  return std::string(Text(*reply));
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
int64_t RingClient::dataset_size() const { return state_->dataset_size; }

}  // namespace stoker::data_service
