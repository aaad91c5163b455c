// DataService: the data_service program as a library. It listens on a Unix socket, serves
// one ring per registered trainer rank (a BatchProducer per connection), and cleans up
// after itself: a closed connection unmaps and unlinks its ring; Shutdown() stops
// everything, joins every thread, unlinks every segment and removes the socket.
#ifndef STOKER_DATA_SERVICE_SERVICE_H_
#define STOKER_DATA_SERVICE_SERVICE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <sys/types.h>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/names.h"
#include "common/unique_fd.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/ring/control_protocol.h"
#include "data_service/worker_pool.h"

namespace stoker::data_service {

struct ServiceOptions {
  std::string socket_path;
  std::string job_id;      // see ValidateJobId (common/names.h)
  int32_t node_id = 0;
  // Decode threads. 0: automatic, the cores less one per trainer rank registered on
  // this node (a rank's training and validation rings count once), at least one: the
  // pool has cores - 1 threads and only that many take work.
  int32_t threads = 0;
  int32_t prefetch = 2;    // batches per ring decoded at the same time
  // Evaluation Resize() = round(image_size * eval_resize_ratio), in [1, 8].
  double eval_resize_ratio = kDefaultEvalResizeRatio;
  // Images of more pixels are unusable samples (decompression bombs).
  int64_t max_image_pixels = image::kDefaultMaxPixels;
  bool exact_jpeg = false;  // SampleOptions::exact_jpeg
  // BatchProducerOptions::gpu_decode_share, in [0, 1]: the share of each batch whose JPEG
  // the trainer decodes (Note [Deferred samples] in data_service/image/deferred_jpeg.h).
  double gpu_decode_share = 0.0;
  BadSampleOptions bad_samples;
};

// What the service holds and has done, for logs and tests.
struct ServiceStats {
  int32_t rings = 0;            // rings mapped now
  int32_t local_ranks = 0;      // distinct ranks with a ring now
  uint64_t ring_bytes = 0;      // their shared-memory segments, summed
  uint64_t scratch_bytes = 0;   // the decode threads' reusable buffers, summed
  int32_t decode_threads = 0;   // the pool's threads
  int32_t active_threads = 0;   // those that take work now
  BadSampleStats bad_samples;   // samples seen, replaced, distinct bad files
};

// The service. Thread-safe. Threads: one accepts connections, one per connection serves
// its control messages (and owns its BatchProducer), plus the decode pool. Its resident
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
  // removes the socket. Idempotent.
  void Shutdown();

  // Not OK once the service can no longer accept connections (its message says why).
  absl::Status health();

  // Connections currently open (for tests).
  int connection_count();
  int thread_count() const { return pool_->thread_count(); }
  ServiceStats stats();

 private:
  struct Connection;

  DataService(const ServiceOptions& options, Datasets datasets, UniqueFd listener,
              UniqueFd stop_event, dev_t socket_device, ino_t socket_inode);
  void AcceptLoop();
  void Serve(Connection* connection);
  // Handles one request; false when the connection must be closed.
  bool Handle(Connection* connection, const ControlMessage& message);
  void ReapFinished() ABSL_LOCKS_EXCLUDED(mu_);
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
  std::shared_ptr<BadSampleCounters> bad_counters_;
  std::unique_ptr<BadSampleTracker> train_bad_samples_;
  std::unique_ptr<BadSampleTracker> val_bad_samples_;  // null without a validation split
  std::unique_ptr<WorkerPool> pool_;

  absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;

  std::thread accept_thread_;  // last: started once everything above exists
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_SERVICE_H_
