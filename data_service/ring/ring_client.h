// The trainer's side of the data service: a control connection plus the mapped
// shared-memory ring of one rank. This is data_service's public face
// (//data_service/ring:ring_client); the trainer links nothing else of data_service.
#ifndef STOKER_DATA_SERVICE_RING_RING_CLIENT_H_
#define STOKER_DATA_SERVICE_RING_RING_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data_service/ring/ring.h"
#include "data_service/ring/wire_types.h"

namespace stoker::data_service {

// A published batch, borrowed from the ring until Release(). uint8 NHWC, RGB.
struct BatchView {
  int32_t slot = -1;
  int64_t epoch = 0;
  int64_t step = 0;   // batch index within the epoch, from 0
  int32_t count = 0;  // samples in this batch (<= batch_size)
  // count * image_size * image_size * 3 bytes, in the ring: the one field read from
  // shared memory (Note [Slot contents are checked] in ring_client.cc).
  const uint8_t* images = nullptr;
  // The rest is the client's checked copy of the slot, valid until Release().
  const int32_t* labels = nullptr;          // count labels
  const int64_t* sample_indices = nullptr;  // count dataset indices (for tests and resume)
  // SampleKind of each sample: kPixels, or kDeferredJpeg (a DeferredSampleHeader and a
  // JPEG in the sample's place, for the trainer to decode).
  const uint8_t* sample_kinds = nullptr;
  // count entries; entry i, when sample i is kDeferredJpeg, is the checked copy of its
  // header (whose JPEG follows it in `images`). Null where no sample is deferred.
  const DeferredSampleHeader* deferred_headers = nullptr;
  int32_t deferred_count = 0;  // samples of kind kDeferredJpeg
  // The share of GPU decode positions the batch was produced with (Note [The requested
  // GPU decode share] in data_service/ring/ring.h).
  double gpu_decode_share = 0.0;
};

// Owns the control connection to the data service and this rank's mapped ring.
// Move-only. Acquire(), Release() and ReportBadSample() belong to one thread (the
// trainer's prefetch thread), StartEpoch() to one other (the training thread); the
// control socket is shared between them under a lock.
//
//   ASSIGN_OR_RETURN(auto client, RingClient::Connect(socket, request, absl::Seconds(30)));
//   ASSIGN_OR_RETURN(EpochInfo info, client->StartEpoch(epoch, seed));
//   for (...) { ASSIGN_OR_RETURN(BatchView b, client->Acquire(timeout)); ...; client->Release(b); }
class RingClient {
 public:
  // Connects to the service's Unix socket, registers `request`, and maps the ring the
  // service created for this rank, asking for request.gpu_decode_share in its header
  // before the first batch. Unavailable if the service is not there within
  // `timeout`; InvalidArgument if it refuses the request (the message says why), but
  // OutOfRange if its dataset has more classes than request.num_classes. A refusal for
  // lack of room (/dev/shm, --max_memory) or a taken segment name carries kExitUsage; a
  // ring whose header is not a ring's, kExitPeerLost (Note [Whose fault a ring error is]
  // in ring_client.cc). Later calls wait up to `timeout` for the service's replies.
  static absl::StatusOr<std::unique_ptr<RingClient>> Connect(const std::string& socket_path,
                                                             const RingRequest& request,
                                                             absl::Duration timeout);
  ~RingClient();
  RingClient(const RingClient&) = delete;
  RingClient& operator=(const RingClient&) = delete;

  // Asks the service to produce `epoch` with sampler seed `seed`, from `start_sample`:
  // the samples of the epoch's global order already trained, whose rest the service splits
  // among request().world_size ranks (Note [The rest of an epoch] in
  // data_service/dataset/sampler.h; its batch steps count from 0 again). Epochs must be
  // asked for in increasing order; the next one may be asked for before the current one
  // has been consumed, so that its first batches are ready at the boundary.
  // DeadlineExceeded with kExitPeerLost when the service does not answer within Connect's
  // timeout.
  absl::StatusOr<EpochInfo> StartEpoch(int64_t epoch, uint64_t seed, int64_t start_sample = 0);

  // Waits for the next published batch, in (epoch, step) order. DeadlineExceeded after
  // `timeout`; Unavailable if the service died (its message says so); OutOfRange for a
  // label outside [0, request.num_classes) (Note [Slot contents are checked]) and
  // DataLoss for an inconsistent slot, both with kExitPeerLost.
  absl::StatusOr<BatchView> Acquire(absl::Duration timeout);

  // Tells the service that sample `sample_index` of `epoch`, delivered as a deferred JPEG,
  // could not be decoded (`why`), so that its bad-data policy treats it as it treats a
  // file the CPU path cannot use (Note [GPU decode failures] in
  // data_service/batch_producer.h): counted, logged once by file name, and a run stopped
  // under --bad_files=fail or past --max_bad_fraction. Returns the sample's description
  // (its file) when the policy lets the run go on; else the policy's error (DataLoss,
  // naming the file), which is then fatal for the ring.
  absl::StatusOr<std::string> ReportBadSample(int64_t epoch, int64_t sample_index,
                                              absl::string_view why);

  // Gives the batch's slot back to the producer. Call only once nothing reads the slot
  // any more (on a GPU: after the copy from it has completed).
  absl::Status Release(const BatchView& batch);

  // Asks the service for `share` (in [0, 1]) of each batch as deferred samples from the
  // next batch it starts on; batches already produced or being produced keep theirs
  // (Note [The requested GPU decode share] in data_service/ring/ring.h). Connect() has
  // already asked for request.gpu_decode_share. Unlike the rest of this class, callable
  // from any thread.
  void RequestGpuDecodeShare(double share);

  // The whole mapped ring (for cudaHostRegister) and the geometry it was made with.
  void* ring_base() const;
  size_t ring_bytes() const;
  const RingRequest& request() const;
  // The number of samples in the split the service serves (its sampler's dataset size).
  int64_t dataset_size() const;

 private:
  struct State;
  explicit RingClient(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

namespace internal {

// What a client keeps of one slot (Note [Slot contents are checked] in ring_client.cc).
struct PrivateSlot {
  std::vector<int32_t> labels;
  std::vector<int64_t> sample_indices;
  std::vector<uint8_t> sample_kinds;
  std::vector<DeferredSampleHeader> deferred_headers;  // meaningful where the kind says so
  int32_t deferred_count = 0;
};

// Copies `slot`'s labels, indices, kinds and deferred headers into `copy`, reading each
// once from the ring, and checks the copy; OutOfRange, naming the slot and position, for
// anything the trainer must not use.
absl::Status CopySlotContents(const RingRequest& request, const ReadableSlot& slot,
                              PrivateSlot& copy);

// OutOfRange, saying what is wrong, unless `header` is a deferred sample the trainer may
// decode for a ring of `request`.
absl::Status CheckDeferredHeader(const DeferredSampleHeader& header, const RingRequest& request);

}  // namespace internal
}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_RING_RING_CLIENT_H_
