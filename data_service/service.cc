#include "data_service/service.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/names.h"
#include "common/unix_socket.h"
#include "data_service/batch_producer.h"
#include "data_service/ring/ring.h"

namespace stoker::data_service {
namespace {

constexpr int kPollMillis = 1000;
// The accept thread's poll, short enough to end refusals on time.
constexpr int kAcceptPollMillis = 200;
constexpr int kMaxConnections = 4096;
constexpr absl::Duration kRefusalReadTimeout = absl::Seconds(2);

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// If `path` exists: an error when it is not a socket or a live service answers on it;
// removed with a warning when it is the stale socket of a dead service.
absl::Status ClearStaleSocket(const std::string& path, const sockaddr_un& address) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::AlreadyExistsError(
        absl::StrCat("--socket: ", path, " exists and is not a socket"));
  }
  UniqueFd probe(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return ErrnoToStatus(errno, "socket(AF_UNIX)");
  const int error = ConnectUnixSocket(probe.get(), address);
  if (error == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("--socket: another data_service is listening on ", path));
  }
  if (error != ECONNREFUSED) {
    return ErrnoToStatus(error, absl::StrCat("--socket: probe existing socket ", path));
  }
  LogWarning("removing the stale socket %s of a data_service that is gone", path);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat("--socket: remove stale socket ", path));
  }
  return absl::OkStatus();
}

// Keeps `object` alive until the process ends (Note [Abandoned decodes at shutdown]); it
// stays reachable, so leak checkers do not report it.
void KeepForever(std::shared_ptr<void> object) {
  static absl::Mutex* const mu = new absl::Mutex;
  static auto* const kept = new std::vector<std::shared_ptr<void>>;
  absl::MutexLock lock(mu);
  kept->push_back(std::move(object));
}

}  // namespace

// One client connection. The Serve thread owns everything but `send_mu`-guarded sends,
// which the producer's error callback also makes.
struct DataService::Connection {
  UniqueFd fd;
  pid_t peer_pid = 0;
  absl::Mutex send_mu;
  std::unique_ptr<BatchProducer> producer;
  int32_t rank = -1;
  // The producer's ring size while it exists (read by stats() from other threads).
  std::atomic<uint64_t> ring_bytes{0};
  std::atomic<bool> finished{false};
  // Not OK for a connection that is refused (another uid).
  absl::Status refusal;
  absl::Time accepted;
  // Its first request, read by the accept thread (Note [Connections without a thread]).
  ControlMessage first;
  // The ring's bytes counted by the memory limit while the producer exists.
  uint64_t limit_bytes = 0;
  // Not OK when its producer could not be stopped in time (set by the Serve thread before
  // `finished`).
  absl::Status drain;
  std::thread thread;

  absl::Status Send(const ControlMessage& message) {
    absl::MutexLock lock(&send_mu);
    return SendMessage(fd.get(), message);
  }
};

std::string DataServiceTracePath(const ServiceOptions& options) {
  return absl::StrCat(options.trace_dir, "/data_service.node", options.node_id, ".json");
}

absl::Status ServiceOptions::Validate() const {
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads: must be 0 (automatic) or positive, got ", threads));
  }
  if (prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefetch: must be at least 1, got ", prefetch));
  }
  if (absl::Status s = CheckImageOptions(eval_resize_ratio, max_image_pixels); !s.ok()) return s;
  if (absl::Status s = CheckGpuDecodeShare(gpu_decode_share); !s.ok()) return s;
  if (absl::Status s = bad_samples.Validate(); !s.ok()) return s;
  if (shutdown_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--shutdown_timeout_s: must be positive, got ",
                                                   absl::FormatDuration(shutdown_timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DataService>> DataService::Start(const ServiceOptions& options,
                                                                Datasets datasets) {
  if (absl::Status s = ValidateJobId(options.job_id); !s.ok()) return s;
  if (datasets.train == nullptr) return absl::InvalidArgumentError("no training dataset");
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<sockaddr_un> address = UnixSocketAddress(options.socket_path);
  if (!address.ok()) return Prefixed("--socket: ", address.status());
  if (absl::Status s = ClearStaleSocket(options.socket_path, *address); !s.ok()) return s;

  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return ErrnoToStatus(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  if (const int error = BindUnixSocket(listener.get(), *address); error != 0) {
    if (error == ENOENT || error == ENOTDIR) {
      return absl::InvalidArgumentError(
          absl::StrCat("--socket: the directory of ", options.socket_path, " does not exist"));
    }
    return Prefixed("--socket: ", ErrnoToStatus(error, absl::StrCat("bind ", options.socket_path)));
  }
  auto remove_socket = absl::MakeCleanup([&] { unlink(options.socket_path.c_str()); });
  // Nobody can connect before listen(), so owner-only from the first connection on.
  if (chmod(options.socket_path.c_str(), 0600) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chmod 0600 ", options.socket_path));
  }
  if (listen(listener.get(), 128) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("listen on ", options.socket_path));
  }
  struct stat st;
  if (stat(options.socket_path.c_str(), &st) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("stat ", options.socket_path));
  }
  UniqueFd stop_event(eventfd(0, EFD_CLOEXEC));
  if (!stop_event.valid()) return ErrnoToStatus(errno, "eventfd");
  absl::StatusOr<std::unique_ptr<MemoryLimit>> memory_limit = MemoryLimit::Install(
      options.max_memory,
      options.threads > 0 ? options.threads : WorkerPool::DefaultThreadCount(1));
  if (!memory_limit.ok()) return memory_limit.status();
  std::move(remove_socket).Cancel();
  return std::unique_ptr<DataService>(
      new DataService(options, std::move(datasets), std::move(listener), std::move(stop_event),
                      st.st_dev, st.st_ino, std::move(*memory_limit)));
}

DataService::DataService(const ServiceOptions& options, Datasets datasets, UniqueFd listener,
                         UniqueFd stop_event, dev_t socket_device, ino_t socket_inode,
                         std::unique_ptr<MemoryLimit> memory_limit)
    : options_(options),
      datasets_(std::move(datasets)),
      listener_(std::move(listener)),
      stop_event_(std::move(stop_event)),
      socket_device_(socket_device),
      socket_inode_(socket_inode),
      memory_limit_(std::move(memory_limit)),
      bad_counters_(std::make_shared<BadSampleCounters>()),
      train_bad_samples_(std::make_unique<BadSampleTracker>(
          options.bad_samples, datasets_.train->size(), bad_counters_)),
      val_bad_samples_(datasets_.val == nullptr
                           ? nullptr
                           : std::make_unique<BadSampleTracker>(
                                 options.bad_samples, datasets_.val->size(), bad_counters_)),
      trace_(options.trace_dir.empty()
                 ? nullptr
                 : std::make_unique<TraceRecorder>(
                       DataServiceTracePath(options), kDataServiceTracePidBase + options.node_id,
                       absl::StrCat("data service of node ", options.node_id, " on ",
                                    TraceHostName()))),
      pool_(std::make_unique<WorkerPool>(options.threads > 0 ? options.threads
                                                             : WorkerPool::DefaultThreadCount(1))),
      accept_thread_([this] { AcceptLoop(); }) {
  if (trace_ != nullptr) {
    if (options_.trace_file != nullptr && options_.trace_file->valid()) {
      trace_->WriteThrough(std::move(*options_.trace_file));
    }
    for (int i = 0; i < pool_->thread_count(); ++i) {
      trace_->NameThread(kDecodeTraceThreadBase + i, absl::StrCat("decode thread ", i));
    }
    trace_->SetMetadata("kind", "\"data_service\"");
    trace_->SetMetadata("node", absl::StrCat(options_.node_id));
    trace_->SetMetadata("host", TraceJsonString(TraceHostName()));
    trace_->SetMetadata("decode_threads", absl::StrCat(pool_->thread_count()));
    trace_->SetMetadata("batches", absl::StrCat("[", options_.trace_batches.first, ",",
                                                options_.trace_batches.end, "]"));
    trace_->Start();
  }
  LogInfo(
      "listening on %s (job %s, node %d, %d decode threads%s, training samples %d%s; "
      "--bad_files=%s, --max_bad_fraction=%g; %s)",
      options_.socket_path, options_.job_id, options_.node_id, pool_->thread_count(),
      options_.threads > 0 ? "" : " (automatic: the cores less one per local rank)",
      datasets_.train->size(),
      datasets_.val ? absl::StrCat(", validation samples ", datasets_.val->size()) : "",
      BadFilePolicyName(options_.bad_samples.policy), options_.bad_samples.max_fraction,
      memory_limit_->Describe());
}

DataService::~DataService() { (void)Shutdown(); }

absl::Status DataService::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (shutdown_done_) return shutdown_status_;
  shutdown_done_ = true;
  const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    shutdown_deadline_ = deadline;
  }
  LogInfo("shutting down: %s", MemoryReport());
  const uint64_t one = 1;
  if (write(stop_event_.get(), &one, sizeof(one)) != sizeof(one)) {
    LogError("cannot signal shutdown to the service threads: %s", std::strerror(errno));
  }
  accept_thread_.join();
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  // Each Serve thread ends within the deadline (StopProducer).
  std::vector<std::string> stuck;
  for (std::unique_ptr<Connection>& connection : connections) {
    connection->thread.join();
    if (!connection->drain.ok()) stuck.emplace_back(connection->drain.message());
  }
  connections.clear();  // every ring is unmapped and unlinked by now, or abandoned
  std::unique_ptr<WorkerPool> pool;
  {
    absl::MutexLock lock(&mu_);  // stats() reads the pool under mu_
    pool = std::move(pool_);
  }
  absl::Status pool_stopped = pool->Stop(deadline);
  if (pool_stopped.ok()) {
    pool.reset();
  } else {
    stuck.insert(stuck.begin(), std::string(pool_stopped.message()));
    KeepForever(std::shared_ptr<WorkerPool>(std::move(pool)));
  }
  if (trace_ != nullptr) {
    if (absl::Status written = trace_->Finish(); !written.ok()) {
      LogWarning("the trace: %s", written.message());
    }
  }
  struct stat st;
  if (stat(options_.socket_path.c_str(), &st) == 0 && st.st_dev == socket_device_ &&
      st.st_ino == socket_inode_) {
    unlink(options_.socket_path.c_str());
  }
  listener_.Reset();
  if (!stuck.empty()) {
    shutdown_status_ = absl::DeadlineExceededError(absl::StrCat(
        "shutdown: the samples being decoded did not finish within ",
        absl::FormatDuration(options_.shutdown_timeout),
        " (--shutdown_timeout_s): ", absl::StrJoin(stuck, "; "),
        ". The rings' names and the socket are removed; not waiting for the stuck reads"));
    return shutdown_status_;
  }
  LogInfo("stopped");
  return absl::OkStatus();
}

void DataService::StopProducer(Connection* connection) {
  absl::Time deadline;
  {
    absl::MutexLock lock(&mu_);
    deadline = shut_down_ ? shutdown_deadline_ : absl::Now() + options_.shutdown_timeout;
  }
  const std::string name = connection->producer->segment_name();
  connection->ring_bytes.store(0);
  absl::Status stopped = connection->producer->Stop(deadline);
  if (stopped.ok()) {
    connection->producer.reset();
    memory_limit_->RemoveRing(connection->limit_bytes);
    connection->limit_bytes = 0;
    LogInfo("rank %d: ring %s unmapped and unlinked", connection->rank, name);
    return;
  }
  KeepForever(std::shared_ptr<BatchProducer>(std::move(connection->producer)));
  connection->drain = stopped;
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;  // Shutdown() reports it
  // Note [Abandoned decodes at shutdown]: a decode thread is stuck; stop serving.
  std::string busy;
  if (pool_ != nullptr) {
    for (const BusyWorker& worker : pool_->busy_workers()) {
      absl::StrAppend(&busy, "; decode thread ", worker.thread, " has been ",
                      worker.activity.empty() ? "in a task" : "on " + worker.activity, " for ",
                      absl::FormatDuration(absl::Trunc(worker.busy_for, absl::Milliseconds(100))));
    }
  }
  health_ = absl::DeadlineExceededError(
      absl::StrCat("rank ", connection->rank, " disconnected but ", stopped.message(), busy));
  LogError("%s", health_.message());
}

absl::Status DataService::health() {
  absl::MutexLock lock(&mu_);
  return health_;
}

int DataService::connection_count() {
  ReapFinished();
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size());
}

ServiceStats DataService::stats() {
  absl::MutexLock lock(&mu_);
  return StatsLocked();
}

ServiceStats DataService::StatsLocked() {
  ServiceStats stats;
  absl::flat_hash_set<int32_t> ranks;  // a rank's training and validation rings count once
  for (const std::unique_ptr<Connection>& connection : connections_) {
    const uint64_t bytes = connection->ring_bytes.load();
    if (bytes == 0) continue;
    ++stats.rings;
    stats.ring_bytes += bytes;
    ranks.insert(connection->rank);
  }
  stats.local_ranks = static_cast<int32_t>(ranks.size());
  if (pool_ != nullptr) {
    stats.scratch_bytes = pool_->scratch_bytes();
    stats.decode_threads = pool_->thread_count();
    stats.active_threads = pool_->active_threads();
  }
  stats.bad_samples = bad_counters_->stats();
  return stats;
}

std::string DataService::MemoryReport() {
  const ServiceStats s = stats();
  return absl::StrFormat(
      "%d rings of %d local ranks, %.1f MiB of ring memory; decode scratch %.1f MiB over %d "
      "threads (%d active); samples seen %d, replaced %d, unusable files %d",
      s.rings, s.local_ranks, s.ring_bytes / 1048576.0, s.scratch_bytes / 1048576.0,
      s.decode_threads, s.active_threads, s.bad_samples.samples_seen, s.bad_samples.samples_skipped,
      s.bad_samples.bad_files);
}

void DataService::UpdateActiveThreads() {
  if (options_.threads > 0 || pool_ == nullptr) return;
  const int active = WorkerPool::DefaultThreadCount(std::max(1, StatsLocked().local_ranks));
  if (active != pool_->active_threads()) {
    pool_->SetActiveThreads(active);
    LogInfo("%d of %d decode threads take work (the cores less one per local rank)",
            pool_->active_threads(), pool_->thread_count());
  }
}

void DataService::ReapFinished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->finished.load()) {
        finished.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    if (!finished.empty()) UpdateActiveThreads();
  }
  for (std::unique_ptr<Connection>& connection : finished) connection->thread.join();
}

void DataService::AcceptLoop() {
  // Note [Connections without a thread]: those that have sent nothing yet. Accept thread only.
  std::vector<std::unique_ptr<Connection>> waiting;
  std::vector<pollfd> fds;
  while (true) {
    fds.assign({{listener_.get(), POLLIN, 0}, {stop_event_.get(), POLLIN, 0}});
    for (const std::unique_ptr<Connection>& connection : waiting) {
      fds.push_back({connection->fd.get(), POLLIN, 0});
    }
    const int ready = poll(fds.data(), fds.size(), kAcceptPollMillis);
    if (ready < 0 && errno != EINTR) {
      absl::MutexLock lock(&mu_);
      health_ = ErrnoToStatus(errno, "poll on the listening socket");
      LogError("%s", health_.message());
      return;
    }
    ReapFinished();
    if (ready > 0 && fds[1].revents != 0) return;  // the waiting connections close with it
    std::vector<std::unique_ptr<Connection>> still_waiting;
    for (size_t i = 0; i < waiting.size(); ++i) {
      std::unique_ptr<Connection>& connection = waiting[i];
      if (ready <= 0 || fds[2 + i].revents == 0) {
        if (!connection->refusal.ok() && absl::Now() - connection->accepted > kRefusalReadTimeout) {
          (void)SendMessage(connection->fd.get(), ErrorMessage(connection->refusal, 0));
        } else {
          still_waiting.push_back(std::move(connection));
        }
        continue;
      }
      absl::StatusOr<ControlMessage> message =
          ReceiveMessage(connection->fd.get(), absl::ZeroDuration());
      if (absl::IsDeadlineExceeded(message.status())) {
        still_waiting.push_back(std::move(connection));
        continue;
      }
      if (!connection->refusal.ok()) {
        // Answer the first request with the refusal, then close. (Closing at once, with the
        // request unread, would reset the connection and lose the reason.)
        (void)SendMessage(
            connection->fd.get(),
            ErrorMessage(connection->refusal, message.ok() ? message->request_id : 0));
        continue;
      }
      if (absl::IsUnavailable(message.status())) continue;  // gone before a request
      if (!message.ok()) {
        LogWarning("closing the connection of pid %d after a bad control message: %s",
                   connection->peer_pid, message.status().message());
        (void)SendMessage(connection->fd.get(), ErrorMessage(message.status(), 0));
        continue;
      }
      connection->first = *message;
      StartServing(std::move(connection));
    }
    waiting.swap(still_waiting);
    if (ready <= 0 || fds[0].revents == 0) continue;
    UniqueFd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      LogWarning("accept on %s: %s", options_.socket_path, std::strerror(errno));
      absl::SleepFor(absl::Milliseconds(100));  // EMFILE and friends: do not spin
      continue;
    }
    ucred peer;
    socklen_t length = sizeof(peer);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
      LogWarning("refusing a connection whose credentials are unknown: %s", std::strerror(errno));
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = std::move(fd);
    connection->peer_pid = peer.pid;
    connection->accepted = absl::Now();
    if (peer.uid != geteuid()) {
      LogWarning("refusing a connection from pid %d: uid %d is not the service's uid %d", peer.pid,
                 peer.uid, geteuid());
      connection->refusal = absl::PermissionDeniedError(
          absl::StrCat("uid ", peer.uid, " may not use a data service of uid ", geteuid()));
    }
    size_t open_connections = waiting.size();
    {
      absl::MutexLock lock(&mu_);
      open_connections += connections_.size();
    }
    if (open_connections >= static_cast<size_t>(kMaxConnections)) {
      LogWarning("refusing a connection from pid %d: %d connections are open", peer.pid,
                 kMaxConnections);
      (void)SendMessage(connection->fd.get(),
                        ErrorMessage(absl::ResourceExhaustedError("too many connections"), 0));
      continue;
    }
    waiting.push_back(std::move(connection));
  }
}

void DataService::StartServing(std::unique_ptr<Connection> connection) {
  absl::MutexLock lock(&mu_);
  Connection* raw = connection.get();
  try {
    raw->thread = std::thread([this, raw] { Serve(raw); });
  } catch (const std::system_error& e) {
    // No memory (--max_memory) or thread left for it: refuse this one, keep serving.
    LogWarning("refusing a connection from pid %d: cannot start its thread: %s", raw->peer_pid,
               e.what());
    (void)SendMessage(raw->fd.get(),
                      ErrorMessage(absl::ResourceExhaustedError(absl::StrCat(
                                       "the data service cannot start a thread for this "
                                       "connection: ",
                                       e.what())),
                                   raw->first.request_id));
    return;
  }
  connections_.push_back(std::move(connection));
}

void DataService::Serve(Connection* connection) {
  bool open = Handle(connection, connection->first);
  while (open) {
    pollfd fds[2] = {{connection->fd.get(), POLLIN, 0}, {stop_event_.get(), POLLIN, 0}};
    const int ready = poll(fds, 2, kPollMillis);
    if (ready < 0 && errno != EINTR) {
      LogError("poll on the connection of pid %d: %s", connection->peer_pid, std::strerror(errno));
      break;
    }
    if (ready <= 0) continue;
    if (fds[1].revents != 0) break;
    if (fds[0].revents == 0) continue;
    absl::StatusOr<ControlMessage> message =
        ReceiveMessage(connection->fd.get(), absl::ZeroDuration());
    if (absl::IsDeadlineExceeded(message.status())) continue;
    if (absl::IsUnavailable(message.status())) {
      LogInfo("rank %d (pid %d) disconnected", connection->rank, connection->peer_pid);
      break;
    }
    if (!message.ok()) {
      LogWarning("closing the connection of pid %d after a bad control message: %s",
                 connection->peer_pid, message.status().message());
      (void)connection->Send(ErrorMessage(message.status(), 0));
      break;
    }
    if (!Handle(connection, *message)) break;
  }
  if (connection->producer != nullptr) StopProducer(connection);
  connection->fd.Reset();
  connection->finished.store(true);
}

bool DataService::Handle(Connection* connection, const ControlMessage& message) {
  const uint32_t id = message.request_id;
  switch (static_cast<MessageType>(message.type)) {
    case MessageType::kRegister: {
      const RingRequest request = GetRequest(message);
      if (connection->producer != nullptr) {
        return connection
            ->Send(ErrorMessage(absl::FailedPreconditionError(absl::StrCat(
                                    "this connection already registered rank ", connection->rank)),
                                id))
            .ok();
      }
      std::shared_ptr<const Dataset> dataset = request.train ? datasets_.train : datasets_.val;
      if (dataset == nullptr) {
        return connection
            ->Send(
                ErrorMessage(absl::InvalidArgumentError("this data service has no validation split "
                                                        "(start it with --val_dir)"),
                             id))
            .ok();
      }
      if (request.num_classes > 0 && dataset->num_classes() > request.num_classes) {
        const absl::Status refused = absl::OutOfRangeError(absl::StrCat(
            "the ", request.train ? "training" : "validation", " dataset has ",
            dataset->num_classes(), " classes but the trainer has --num_classes=",
            request.num_classes, ": labels ", request.num_classes, "..", dataset->num_classes() - 1,
            " would be out of range; pass --num_classes=", dataset->num_classes()));
        LogWarning("refusing the ring request of rank %d (pid %d): %s", request.rank,
                   connection->peer_pid, refused.message());
        return connection->Send(ErrorMessage(refused, id)).ok();
      }
      BatchProducerOptions producer_options;
      producer_options.segment_name = RingSegmentName(options_.job_id, request.rank, request.train);
      producer_options.request = request;
      producer_options.prefetch = options_.prefetch;
      producer_options.eval_resize_ratio = options_.eval_resize_ratio;
      producer_options.max_image_pixels = options_.max_image_pixels;
      producer_options.exact_jpeg = options_.exact_jpeg;
      producer_options.gpu_decode_share = options_.gpu_decode_share;
      producer_options.injected_decode_delay = options_.injected_decode_delay;
      if (trace_ != nullptr && request.train) {
        // Tracks of its own per ring: the production thread's waits, then one per slot.
        const int base = kRingTraceThreadBase * (request.rank + 1);
        producer_options.trace = trace_.get();
        producer_options.trace_batches = options_.trace_batches;
        producer_options.trace_thread = base;
        trace_->NameThread(base, absl::StrCat("rank ", request.rank, "'s ring"));
        for (int32_t slot = 0; slot < request.slot_count; ++slot) {
          trace_->NameThread(base + 1 + slot,
                             absl::StrCat("rank ", request.rank, "'s ring: slot ", slot));
        }
      }
      producer_options.bad_samples =
          request.train ? train_bad_samples_.get() : val_bad_samples_.get();
      // Room under --max_memory first (the ring is mapped by Create); an invalid geometry
      // is left to Create's own check.
      uint64_t limit_bytes = 0;
      if (absl::StatusOr<RingLayout> layout = RingLayout::For(
              RingGeometry{request.slot_count, request.batch_size, request.image_size});
          layout.ok()) {
        if (absl::Status room =
                memory_limit_->AddRing(producer_options.segment_name, layout->total_bytes);
            !room.ok()) {
          LogWarning("refusing the ring request of rank %d (pid %d): %s", request.rank,
                     connection->peer_pid, room.message());
          return connection->Send(ErrorMessage(room, id)).ok();
        }
        limit_bytes = layout->total_bytes;
      }
      absl::StatusOr<std::unique_ptr<BatchProducer>> producer = BatchProducer::Create(
          producer_options, std::move(dataset), pool_.get(),
          [connection, rank = request.rank,
           pid = connection->peer_pid](const absl::Status& status) {
            // The rank learns of the failure from this message; if it cannot be sent the
            // rank sees the ring stop (and its --data_timeout_s), so say why here.
            if (absl::Status sent = connection->Send(ErrorMessage(status, 0)); !sent.ok()) {
              LogWarning("rank %d (pid %d): cannot send it the production error (%s): %s", rank,
                         pid, status.message(), sent.message());
            }
          });
      if (!producer.ok()) memory_limit_->RemoveRing(limit_bytes);
      if (!producer.ok()) {
        LogWarning("refusing the ring request of rank %d (pid %d): %s", request.rank,
                   connection->peer_pid, producer.status().message());
        return connection->Send(ErrorMessage(producer.status(), id)).ok();
      }
      connection->producer = std::move(*producer);
      connection->limit_bytes = limit_bytes;
      connection->rank = request.rank;
      connection->ring_bytes.store(connection->producer->ring_bytes());
      {
        absl::MutexLock lock(&mu_);
        UpdateActiveThreads();
      }
      ControlMessage reply = NewMessage(MessageType::kRegistered, id);
      SetRequest(request, &reply);
      reply.ring_bytes = connection->producer->ring_bytes();
      reply.samples = connection->producer->dataset_size();
      SetText(&reply, connection->producer->segment_name());
      LogInfo("rank %d of %d (pid %d): ring %s, %d slots of %d x %dx%dx3, %s split", request.rank,
              request.world_size, connection->peer_pid, connection->producer->segment_name(),
              request.slot_count, request.batch_size, request.image_size, request.image_size,
              request.train ? "training" : "validation");
      // Machine-readable twin of the line above: scripts and tests read a rank's pid from it.
      LogInfo("pid_record role=rank rank=%d world_size=%d split=%s pid=%d", request.rank,
              request.world_size, request.train ? "training" : "validation", connection->peer_pid);
      LogInfo("memory: %s", MemoryReport());
      return connection->Send(reply).ok();
    }
    case MessageType::kStartEpoch: {
      if (connection->producer == nullptr) {
        return connection
            ->Send(ErrorMessage(
                absl::FailedPreconditionError("StartEpoch before the ring was registered"), id))
            .ok();
      }
      absl::StatusOr<EpochInfo> info =
          connection->producer->QueueEpoch(message.epoch, message.seed, message.samples);
      if (!info.ok()) return connection->Send(ErrorMessage(info.status(), id)).ok();
      ControlMessage reply = NewMessage(MessageType::kEpochStarted, id);
      reply.epoch = info->epoch;
      reply.samples = info->samples;
      reply.batches = info->batches;
      return connection->Send(reply).ok();
    }
    case MessageType::kBadSample: {
      if (connection->producer == nullptr) {
        return connection
            ->Send(ErrorMessage(
                absl::FailedPreconditionError("a bad-sample report before the ring was registered"),
                id))
            .ok();
      }
      absl::StatusOr<std::string> counted = connection->producer->ReportGpuDecodeFailure(
          message.epoch, message.sample_index, Text(message));
      if (!counted.ok()) return connection->Send(ErrorMessage(counted.status(), id)).ok();
      ControlMessage reply = NewMessage(MessageType::kBadSampleCounted, id);
      SetText(&reply, *counted);
      return connection->Send(reply).ok();
    }
    default:
      (void)connection->Send(
          ErrorMessage(absl::InvalidArgumentError(absl::StrCat("unexpected control message type ",
                                                               message.type, " from a client")),
                       id));
      return false;
  }
}

}  // namespace stoker::data_service
