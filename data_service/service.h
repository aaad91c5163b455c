// DataService: the data_service program as a library. It listens on a Unix socket, serves
// one ring per registered trainer rank (a BatchProducer per connection), and cleans up
// after itself: a closed connection unmaps and unlinks its ring; Shutdown() stops
// everything, joins every thread, unlinks every segment and removes the socket.
#ifndef STOKER_DATA_SERVICE_SERVICE_H_
#define STOKER_DATA_SERVICE_SERVICE_H_

#include <sys/types.h>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/names.h"
#include "common/trace_events.h"
#include "common/unique_fd.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/memory_limit.h"
#include "data_service/ring/control_protocol.h"
#include "data_service/worker_pool.h"

namespace stoker::data_service {

struct ServiceOptions {
  std::string socket_path;
  std::string job_id;  // see ValidateJobId (common/names.h)
  int32_t node_id = 0;
  // Decode threads. 0: automatic, the cores less one per trainer rank registered on
  // this node (a rank's training and validation rings count once), at least one: the
  // pool has cores - 1 threads and only that many take work.
  int32_t threads = 0;
  int32_t prefetch = 2;  // batches per ring decoded at the same time
  // Evaluation Resize() = round(image_size * eval_resize_ratio), in [1, 8].
  double eval_resize_ratio = kDefaultEvalResizeRatio;
  // Images of more pixels are unusable samples (decompression bombs).
  int64_t max_image_pixels = image::kDefaultMaxPixels;
  bool exact_jpeg = false;  // SampleOptions::exact_jpeg
  // BatchProducerOptions::gpu_decode_share, in [0, 1]: the share of each batch whose JPEG
  // the trainer decodes (Note [Deferred samples] in data_service/image/deferred_jpeg.h),
  // fixed for every ring; nullopt: each ring follows its trainer's request.
  std::optional<double> gpu_decode_share;
  BadSampleOptions bad_samples;
  // How long Shutdown(), or a closed connection, waits for the samples being decoded
  // (Note [Abandoned decodes at shutdown]); positive. Below the launcher's
  // --shutdown_grace, so that the service reports and cleans up before it is killed.
  absl::Duration shutdown_timeout = absl::Seconds(5);
  // The address-space bound (data_service/memory_limit.h). The binary's --max_memory
  // defaults to auto; the library's to none, so that a process that embeds the service
  // (tests, benchmarks) keeps its own limits.
  MaxMemory max_memory{MaxMemory::Kind::kNone, 0};
  // --trace: the directory where the service writes its trace (data_service.node<N>.json,
  // common/trace_events.h) of each training ring's batches `trace_batches`: the decode
  // threads' samples and the rings' slots (BatchProducerOptions::trace); empty: off.
  std::string trace_dir;
  TraceSteps trace_batches{0, 30};
  // With trace_dir: the trace's file, opened before the sandbox went on (OpenTraceFile of
  // DataServiceTracePath; Note [Trace file before the sandbox] in common/trace_events.h);
  // the service that starts with these options takes it and rewrites it in place. Null:
  // the service writes a new file at the window's end (no sandbox in the way).
  std::shared_ptr<UniqueFd> trace_file;
  // For tests only: Note [Injected decode delay].
  absl::Duration injected_decode_delay = absl::ZeroDuration();

  // OkStatus, or InvalidArgument "--<flag>: <its range>, got <value>" for the first of
  // threads, prefetch, the image options, gpu_decode_share, bad_samples and shutdown_timeout
  // that is out of its range. DataService::Start checks it, and the binary's flags too.
  absl::Status Validate() const;
};

// Note [Injected decode delay]: for tests only, STOKER_TEST_SLOW_DECODE=N:MS makes the data
// service of node N wait MS milliseconds before decoding each sample: a slow node whose
// trace verdict tests check (//tests:trace_test). Read by data_service/flags.cc; unset
// (always, outside tests): no delay.

// The trace's clock note and process number for the data service of node `node_id`: its
// ranks are 0..world-1, so a data service is 1000000 + its node.
inline constexpr int kDataServiceTracePidBase = 1000000;

// trace_dir/data_service.node<N>.json: the trace file of the service with `options`.
std::string DataServiceTracePath(const ServiceOptions& options);

// Note [Abandoned decodes at shutdown]
// A decode thread may sit in a read that never returns (a hung NFS or FUSE mount). Its
// sample writes into a ring slot, so that ring cannot be unmapped, and the thread cannot
// be joined; waiting for it would hold the service, and the job's end, for ever. So
// every wait for decodes is bounded by ServiceOptions::shutdown_timeout: past it the
// service removes the ring's name from /dev/shm and the socket (nothing is left for a
// later job to trip on), keeps the ring mapped and the pool alive for the stuck thread
// (they are never destroyed), and reports DeadlineExceeded naming each busy decode
// thread and the file it is on. data_service then exits 124 (the stuck read ends with the
// process). A connection closed while a read hangs does the same after the bound, and the
// service stops serving (health()).

// What the service holds and has done, for logs and tests.
struct ServiceStats {
  int32_t rings = 0;           // rings mapped now
  int32_t local_ranks = 0;     // distinct ranks with a ring now
  uint64_t ring_bytes = 0;     // their shared-memory segments, summed
  uint64_t scratch_bytes = 0;  // the decode threads' reusable buffers, summed
  int32_t decode_threads = 0;  // the pool's threads
  int32_t active_threads = 0;  // those that take work now
  BadSampleStats bad_samples;  // samples seen, replaced, distinct bad files
};

// Note [Connections without a thread]
// A connection gets a thread of its own (which serves its requests and owns its ring's
// producer) only once it has sent a well-formed first request. Until then it waits in the
// accept thread's poll set: an idle peer, a refused one (another uid) or one that sends
// garbage costs a file descriptor, not a thread. A refused peer gets the refusal as the
// answer to its first request, or after two seconds without one; a malformed first message
// is answered with the error and closed. At most 4096 connections are open, waiting ones
// included.

// The service. Thread-safe. Threads: one accepts connections and holds those that have not
// sent a request yet (Note [Connections without a thread]), one per serving connection
// handles its control messages (and owns its BatchProducer), plus the decode pool. Its resident
// memory is the rings plus the decode threads' scratch (stats() reports both; they are
// logged at each registration and at shutdown) plus the dataset listings.
//
//   ASSIGN_OR_RETURN(auto service, DataService::Start(options, std::move(datasets)));
//   ...wait for SIGTERM...;  service->Shutdown();
class DataService {
 public:
  // Creates the socket (mode 0600; its directory must exist) and starts accepting.
  // InvalidArgument naming --socket or --job_id for bad options; AlreadyExists if another
  // service listens on the socket. A stale socket file left by a dead service is replaced.
  static absl::StatusOr<std::unique_ptr<DataService>> Start(const ServiceOptions& options,
                                                            Datasets datasets);
  ~DataService();  // Shutdown()
  DataService(const DataService&) = delete;
  DataService& operator=(const DataService&) = delete;

  // Closes every connection, stops production, joins all threads, unlinks every ring and
  // removes the socket. DeadlineExceeded, naming each decode thread still busy and its
  // file, when the samples being decoded did not finish within
  // ServiceOptions::shutdown_timeout (Note [Abandoned decodes at shutdown]): the rings
  // and the socket are removed all the same. Idempotent: later calls return the first
  // call's result.
  absl::Status Shutdown();

  // Not OK once the service can no longer accept connections (its message says why).
  absl::Status health();

  // Connections being served, by a thread each (for tests).
  int connection_count();
  int thread_count() const { return pool_->thread_count(); }
  ServiceStats stats();

 private:
  struct Connection;

  DataService(const ServiceOptions& options, Datasets datasets, UniqueFd listener,
              UniqueFd stop_event, dev_t socket_device, ino_t socket_inode,
              std::unique_ptr<MemoryLimit> memory_limit);
  void AcceptLoop();
  // Gives `connection` (its first request read) a thread running Serve.
  void StartServing(std::unique_ptr<Connection> connection) ABSL_LOCKS_EXCLUDED(mu_);
  void Serve(Connection* connection);
  // Handles one request; false when the connection must be closed.
  bool Handle(Connection* connection, const ControlMessage& message);
  void ReapFinished() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops `connection`'s producer within the shutdown's deadline (or shutdown_timeout from
  // now when the service is not shutting down) and releases it; one that cannot be
  // stopped in time is kept for ever and its error recorded in connection->drain.
  void StopProducer(Connection* connection) ABSL_LOCKS_EXCLUDED(mu_);
  // With automatic threads, sets the pool's active threads from the ranks registered now.
  void UpdateActiveThreads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ServiceStats StatsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MemoryReport() ABSL_LOCKS_EXCLUDED(mu_);

  const ServiceOptions options_;
  const Datasets datasets_;
  UniqueFd listener_;
  UniqueFd stop_event_;  // an eventfd, readable once Shutdown() starts
  const dev_t socket_device_;
  const ino_t socket_inode_;
  std::unique_ptr<MemoryLimit> memory_limit_;
  std::shared_ptr<BadSampleCounters> bad_counters_;
  std::unique_ptr<BadSampleTracker> train_bad_samples_;
  std::unique_ptr<BadSampleTracker> val_bad_samples_;  // null without a validation split
  std::unique_ptr<TraceRecorder> trace_;               // with --trace; outlives the pool
  std::unique_ptr<WorkerPool> pool_;

  absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Mutex shutdown_mu_;  // serialises Shutdown()
  bool shutdown_done_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Status shutdown_status_ ABSL_GUARDED_BY(shutdown_mu_);

  std::thread accept_thread_;  // last: started once everything above exists
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_SERVICE_H_
