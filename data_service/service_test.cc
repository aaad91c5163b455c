// Tests of DataService with RingClient in one process: registration, epochs, refusals,
// malformed input, other users, cleanup when a client leaves or the service stops, and
// the client's behaviour when the service dies or reports a failed sample.
#include "data_service/service.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/testing/status_matchers.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/dataset/sampler.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "data_service/dataset/testing/forwarding_dataset.h"
#include "data_service/ring/control_protocol.h"
#include "data_service/ring/ring.h"
#include "data_service/ring/ring_client.h"
#include "data_service/service_testing.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

bool SegmentExists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// Waits up to 5 s for `condition`.
template <typename Condition>
bool Eventually(Condition condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// Sleeps in every Load, so that the ring stays empty for a while.
class SlowDataset : public test_util::ForwardingDataset {
 public:
  using ForwardingDataset::ForwardingDataset;
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const override {
    absl::SleepFor(absl::Milliseconds(300));
    return ForwardingDataset::Load(index, options, scratch, dst);
  }
};

// Fails every Load.
class BrokenDataset : public SlowDataset {
 public:
  using SlowDataset::SlowDataset;
  absl::Status Load(int64_t index, const SampleOptions&, SampleScratch&, uint8_t*) const override {
    return absl::DataLossError(absl::StrCat("truncated file for index ", index));
  }
};

std::shared_ptr<const Dataset> Synthetic(int64_t samples, bool validation = false) {
  return std::shared_ptr<const Dataset>(
      std::move(*SyntheticDataset::Create({samples, 10, 1, validation})));
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(test_util::ServiceAddress address,
                         test_util::NewServiceAddress("servicetest"));
    dir_ = std::move(address.dir);
    socket_ = address.socket_path;
    job_ = address.job_id;
  }
  void TearDown() override {
    service_.reset();
    EXPECT_FALSE(SegmentExists(RingSegmentName(job_, 0, true)));
    EXPECT_FALSE(SegmentExists(RingSegmentName(job_, 1, true)));
  }

  void StartService(Datasets datasets = {Synthetic(100), Synthetic(10, true)}, int threads = 2,
                    BadSampleOptions bad_samples = {}) {
    ServiceOptions options;
    options.socket_path = socket_;
    options.job_id = job_;
    options.threads = threads;
    options.bad_samples = bad_samples;
    auto service = DataService::Start(options, std::move(datasets));
    ASSERT_OK(service);
    service_ = std::move(*service);
  }

  RingRequest Request(int rank = 0, int world = 1) {
    return test_util::TrainRequest(rank, world, /*batch_size=*/8, /*image_size=*/16);
  }

  // Request(rank, world) for the validation split.
  RingRequest ValidationRequest(int rank = 0, int world = 1) {
    RingRequest request = Request(rank, world);
    request.train = false;
    return request;
  }

  std::unique_ptr<RingClient> Connect(const RingRequest& request) {
    auto client = RingClient::Connect(socket_, request, absl::Seconds(10));
    EXPECT_OK(client);
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Connect(request), then StartEpoch(0, 1); null (and a test failure) when either fails.
  std::unique_ptr<RingClient> ConnectAtEpochZero(const RingRequest& request) {
    std::unique_ptr<RingClient> client = Connect(request);
    if (client == nullptr) return nullptr;
    const absl::Status started = client->StartEpoch(0, 1).status();
    EXPECT_OK(started);
    return started.ok() ? std::move(client) : nullptr;
  }

  UniqueFd RawConnection() {
    UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET, 0));
    absl::StatusOr<sockaddr_un> address = UnixSocketAddress(socket_);
    EXPECT_OK(address);
    EXPECT_EQ(ConnectUnixSocket(fd.get(), *address), 0);
    return fd;
  }

  stoker::testing::TempDir dir_;
  std::string socket_;
  std::string job_;
  std::unique_ptr<DataService> service_;
};

TEST_F(ServiceTest, SocketIsOwnerOnly) {
  StartService();
  struct stat st;
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(ServiceTest, ClientReceivesEveryBatchOfTwoQueuedEpochs) {
  StartService();
  auto client = Connect(Request(1, 2));
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(SegmentExists(RingSegmentName(job_, 1, true)));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(client->ring_base()) % 4096, 0u);
  EXPECT_GE(client->ring_bytes(), 3u * 8 * 16 * 16 * 3);
  EXPECT_EQ(client->request().rank, 1);
  auto e0 = client->StartEpoch(0, 42);
  auto e1 = client->StartEpoch(1, 42);
  ASSERT_TRUE(e0.ok() && e1.ok()) << e0.status() << e1.status();
  EXPECT_EQ(e0->samples, 50);
  EXPECT_EQ(e0->batches, 7);
  auto sampler = DistributedSampler::Create({100, 2, 1, true, false});
  for (const EpochInfo& info : {*e0, *e1}) {
    std::vector<int64_t> indices;
    for (int64_t step = 0; step < info.batches; ++step) {
      auto batch = client->Acquire(absl::Seconds(20));
      ASSERT_OK(batch);
      EXPECT_EQ(batch->epoch, info.epoch);
      EXPECT_EQ(batch->step, step);
      EXPECT_EQ(batch->count, step + 1 < info.batches ? 8 : 2);
      EXPECT_GE(batch->images, static_cast<const uint8_t*>(client->ring_base()));
      EXPECT_LE(batch->images + batch->count * 16 * 16 * 3,
                static_cast<const uint8_t*>(client->ring_base()) + client->ring_bytes());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(batch->images) % 4096, 0u);
      for (int i = 0; i < batch->count; ++i) {
        indices.push_back(batch->sample_indices[i]);
        EXPECT_EQ(batch->labels[i], batch->sample_indices[i] % 10);
      }
      ASSERT_OK(client->Release(*batch));
    }
    EXPECT_EQ(indices, sampler->EpochIndices(42, info.epoch));
  }
  auto extra = client->Acquire(absl::Milliseconds(10));
  EXPECT_THAT(extra, StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ServiceTest, ValidationRingsGetTheirOwnSegment) {
  StartService();
  auto train = Connect(Request());
  auto val = Connect(ValidationRequest());
  ASSERT_NE(train, nullptr);
  ASSERT_NE(val, nullptr);
  EXPECT_TRUE(SegmentExists(RingSegmentName(job_, 0, false)));
  auto info = val->StartEpoch(0, 5);
  ASSERT_OK(info);
  EXPECT_EQ(info->samples, 10);
  auto batch = val->Acquire(absl::Seconds(20));
  ASSERT_OK(batch);
  EXPECT_EQ(batch->sample_indices[0], 0);
  EXPECT_EQ(batch->sample_indices[7], 7);
  val.reset();
  EXPECT_TRUE(Eventually([&] { return !SegmentExists(RingSegmentName(job_, 0, false)); }));
}

TEST_F(ServiceTest, BadRequestsAreRefusedWithInvalidArgument) {
  StartService();
  RingRequest request = Request();
  request.image_size = 0;
  auto refused = RingClient::Connect(socket_, request, absl::Seconds(10));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image_size")));

  request = Request();
  request.batch_size = kMaxBatchSize;
  request.image_size = kMaxImageSize;
  refused = RingClient::Connect(socket_, request, absl::Seconds(10));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("/dev/shm")));
  // No room on the node is the configuration's fault (Note [Whose fault a ring error is]).
  EXPECT_EQ(ExitCodeOf(refused.status()), kExitUsage);

  request = Request(3, 2);
  refused = RingClient::Connect(socket_, request, absl::Seconds(10));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ExitCodeOf(refused.status()), kExitFailure);

  // The service is unharmed.
  EXPECT_NE(Connect(Request()), nullptr);
}

TEST_F(ServiceTest, ADatasetWithMoreClassesThanTheTrainersIsRefusedNamingBothCounts) {
  StartService();  // synthetic: 10 classes
  RingRequest request = Request();
  request.num_classes = 4;
  const absl::Time start = absl::Now();
  auto refused = RingClient::Connect(socket_, request, absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_THAT(
      refused,
      StatusIs(
          absl::StatusCode::kOutOfRange,
          HasSubstr("the training dataset has 10 classes but the trainer has --num_classes=4")));
  EXPECT_FALSE(SegmentExists(RingSegmentName(job_, 0, true)));

  // As many classes as the trainer's, or fewer, is fine.
  for (int32_t classes : {10, 12}) {
    request.num_classes = classes;
    auto client = ConnectAtEpochZero(request);
    ASSERT_NE(client, nullptr);
    auto batch = client->Acquire(absl::Seconds(20));
    ASSERT_OK(batch);
    ASSERT_OK(client->Release(*batch));
    client.reset();
    EXPECT_TRUE(Eventually([&] { return !SegmentExists(RingSegmentName(job_, 0, true)); }));
  }
}

// Says it has 4 classes, but labels its samples 0..9 (a broken dataset, or a corrupted ring).
class MislabelledDataset final : public test_util::ForwardingDataset {
 public:
  using ForwardingDataset::ForwardingDataset;
  int32_t num_classes() const override { return 4; }
};

TEST_F(ServiceTest, ALabelOutsideNumClassesInASlotFailsTheClient) {
  StartService({std::make_shared<MislabelledDataset>(Synthetic(100)), nullptr});
  RingRequest request = Request();
  request.num_classes = 4;
  auto client = ConnectAtEpochZero(request);
  ASSERT_NE(client, nullptr);
  absl::Status failed;
  for (int step = 0; step < 13 && failed.ok(); ++step) {
    auto batch = client->Acquire(absl::Seconds(20));
    failed = batch.status();
    if (batch.ok()) {
      ASSERT_OK(client->Release(*batch));
    }
  }
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kOutOfRange,
                               AllOf(HasSubstr("rank 0: ring slot "),
                                     HasSubstr("labels must be in [0, 4) (--num_classes)"))));
  // The service checked the dataset's classes at registration, so a label beyond them in a
  // slot is another process's fault: a lost peer, not bad data.
  EXPECT_EQ(ExitCodeOf(failed), kExitPeerLost);
  // Fatal for the ring: the next call says the same.
  const absl::Status again = client->Acquire(absl::Seconds(1)).status();
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(ExitCodeOf(again), kExitPeerLost);
}

TEST_F(ServiceTest, ARankCanHoldOnlyOneRing) {
  StartService();
  auto first = Connect(Request());
  ASSERT_NE(first, nullptr);
  auto second = RingClient::Connect(socket_, Request(), absl::Seconds(10));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already exists")));
  EXPECT_EQ(ExitCodeOf(second.status()), kExitUsage);
  // The refusal must not have removed the first client's ring.
  EXPECT_TRUE(SegmentExists(RingSegmentName(job_, 0, true)));
}

TEST_F(ServiceTest, EpochsMustIncrease) {
  StartService();
  auto client = Connect(Request());
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->StartEpoch(4, 1));
  EXPECT_THAT(client->StartEpoch(4, 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_OK(client->StartEpoch(5, 1));
}

TEST_F(ServiceTest, ClosingAClientUnmapsAndUnlinksItsRing) {
  StartService();
  auto client = ConnectAtEpochZero(Request());
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(service_->connection_count(), 1);
  client.reset();  // with batches still in flight
  EXPECT_TRUE(Eventually([&] { return !SegmentExists(RingSegmentName(job_, 0, true)); }));
  EXPECT_TRUE(Eventually([&] { return service_->connection_count() == 0; }));
  // The rank may register again.
  EXPECT_NE(Connect(Request()), nullptr);
}

TEST_F(ServiceTest, ShutdownUnlinksEveryRingAndRemovesTheSocket) {
  StartService();
  auto a = Connect(Request(0, 2));
  auto b = Connect(Request(1, 2));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK(a->StartEpoch(0, 1));
  EXPECT_OK(service_->Shutdown());
  EXPECT_FALSE(SegmentExists(RingSegmentName(job_, 0, true)));
  EXPECT_FALSE(SegmentExists(RingSegmentName(job_, 1, true)));
  struct stat st;
  EXPECT_NE(stat(socket_.c_str(), &st), 0);
  EXPECT_OK(service_->Shutdown());  // idempotent
}

TEST_F(ServiceTest, AcquireReturnsUnavailableSoonAfterTheServiceDies) {
  StartService({std::make_shared<SlowDataset>(Synthetic(100)), nullptr}, 1);
  auto client = ConnectAtEpochZero(Request());
  ASSERT_NE(client, nullptr);
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (void)service_->Shutdown();
  });
  const absl::Time start = absl::Now();
  auto batch = client->Acquire(absl::Seconds(30));
  killer.join();
  EXPECT_THAT(batch, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(client->StartEpoch(1, 1), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client->Acquire(absl::Seconds(1)), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(ServiceTest, AcquireTimesOutWithDeadlineExceeded) {
  StartService({std::make_shared<SlowDataset>(Synthetic(100)), nullptr}, 1);
  auto client = ConnectAtEpochZero(Request());
  ASSERT_NE(client, nullptr);
  const absl::Time start = absl::Now();
  auto batch = client->Acquire(absl::Milliseconds(250));
  EXPECT_THAT(batch, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(240));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(ServiceTest, AFailedSampleReachesTheClientAsItsError) {
  StartService({std::make_shared<BrokenDataset>(Synthetic(100)), nullptr}, 1);
  auto client = Connect(Request());
  ASSERT_NE(client, nullptr);
  // The error may overtake the reply to StartEpoch; either call then reports it.
  auto info = client->StartEpoch(0, 1);
  absl::Status status = info.status();
  if (info.ok()) status = client->Acquire(absl::Seconds(20)).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss,
                               AllOf(HasSubstr("truncated file"), HasSubstr("epoch 0, step 0"))));
  EXPECT_EQ(ExitCodeOf(status), kExitBadData);  // the dataset's fault
  EXPECT_THAT(client->Acquire(absl::Seconds(1)), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(client->StartEpoch(1, 1), StatusIs(absl::StatusCode::kDataLoss));
}

// An ImageFolder of `good` photo-like JPEGs in one class, plus class0/broken.jpg (not
// a JPEG) when asked for.
std::shared_ptr<const Dataset> JpegFolder(const std::string& name, int good, bool broken) {
  const std::string root = test_util::TestDirectory(name);
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/class0");
  for (int i = 0; i < good; ++i) {
    EXPECT_OK(test_util::WriteJpeg(absl::StrCat(root, "/class0/", i, ".jpg"), 64, 48,
                                   test_util::PhotoLikeImage(64, 48, i)));
  }
  if (broken) {
    EXPECT_OK(test_util::WriteFileBytes(root + "/class0/broken.jpg", {'n', 'o'}));
  }
  auto dataset = ImageFolderDataset::Open(root);
  EXPECT_OK(dataset);
  return std::shared_ptr<const Dataset>(std::move(*dataset));
}

TEST_F(ServiceTest, AnUnusableFileFailsTheClientNamingItWithBadFilesFail) {
  BadSampleOptions fail;
  fail.policy = BadFilePolicy::kFail;
  StartService({JpegFolder("service_fail", 5, true), nullptr}, 2, fail);
  auto client = Connect(Request());
  ASSERT_NE(client, nullptr);
  auto info = client->StartEpoch(0, 1);
  absl::Status status = info.status();
  while (status.ok()) {
    auto batch = client->Acquire(absl::Seconds(20));
    status = batch.status();
    if (batch.ok()) {
      ASSERT_OK(client->Release(*batch));
    }
  }
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("class0/broken.jpg"), HasSubstr("not a JPEG or PNG"))));
  EXPECT_EQ(service_->stats().bad_samples.bad_files, 1);
}

// Note [GPU decode failures] in batch_producer.h: a sample the trainer could not decode,
// reported on the socket, goes through the service's bad-data policy.
TEST_F(ServiceTest, AReportedGpuDecodeFailureIsCountedAndAnsweredWithTheFile) {
  BadSampleOptions skip;
  skip.max_fraction = 0.5;
  skip.min_samples = 1;
  std::shared_ptr<const Dataset> dataset = JpegFolder("service_gpu_skip", 8, false);
  StartService({dataset, nullptr}, 2, skip);
  auto client = ConnectAtEpochZero(Request());
  ASSERT_NE(client, nullptr);
  auto batch = client->Acquire(absl::Seconds(20));
  ASSERT_OK(batch);
  const int64_t index = batch->sample_indices[3];
  absl::StatusOr<std::string> named = client->ReportBadSample(0, index, "nvJPEG: bad JPEG");
  ASSERT_OK(named);
  EXPECT_EQ(*named, dataset->Describe(index));
  EXPECT_EQ(service_->stats().bad_samples.bad_files, 1);
  EXPECT_EQ(service_->stats().bad_samples.samples_skipped, 1);
  EXPECT_THAT(client->ReportBadSample(0, 1000, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the dataset")));
}

TEST_F(ServiceTest, AReportedGpuDecodeFailureStopsTheRunWithBadFilesFail) {
  BadSampleOptions fail;
  fail.policy = BadFilePolicy::kFail;
  std::shared_ptr<const Dataset> dataset = JpegFolder("service_gpu_fail", 8, false);
  StartService({dataset, nullptr}, 2, fail);
  auto client = ConnectAtEpochZero(Request());
  ASSERT_NE(client, nullptr);
  auto batch = client->Acquire(absl::Seconds(20));
  ASSERT_OK(batch);
  const int64_t index = batch->sample_indices[0];
  EXPECT_THAT(client->ReportBadSample(0, index, "nvJPEG: bad JPEG"),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(dataset->Describe(index)), HasSubstr("--bad_files=fail"))));
  EXPECT_EQ(service_->stats().bad_samples.bad_files, 1);
  // Fatal for the ring: the next calls give the same error.
  EXPECT_THAT(client->StartEpoch(1, 1), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(ServiceTest, StatsReportRingsScratchAndReplacedSamples) {
  StartService({JpegFolder("service_stats", 15, true), JpegFolder("service_stats_val", 4, false)},
               2);
  ServiceStats stats = service_->stats();
  EXPECT_EQ(stats.rings, 0);
  EXPECT_EQ(stats.decode_threads, 2);
  EXPECT_EQ(stats.active_threads, 2);
  auto train = Connect(Request());
  auto val = Connect(ValidationRequest());
  ASSERT_NE(train, nullptr);
  ASSERT_NE(val, nullptr);
  stats = service_->stats();
  EXPECT_EQ(stats.rings, 2);
  EXPECT_EQ(stats.local_ranks, 1) << "a rank's training and validation rings are one rank";
  EXPECT_EQ(stats.ring_bytes, train->ring_bytes() + val->ring_bytes());
  ASSERT_OK(train->StartEpoch(0, 3));
  for (int step = 0; step < 2; ++step) {
    auto batch = train->Acquire(absl::Seconds(20));
    ASSERT_OK(batch);
    EXPECT_EQ(batch->count, 8) << "the broken file's place is filled";
    ASSERT_OK(train->Release(*batch));
  }
  stats = service_->stats();
  EXPECT_GT(stats.scratch_bytes, 0u);
  EXPECT_LT(stats.scratch_bytes, 64u << 20);
  EXPECT_EQ(stats.bad_samples.samples_seen, 16);
  EXPECT_EQ(stats.bad_samples.samples_skipped, 1);
  EXPECT_EQ(stats.bad_samples.bad_files, 1);
  train.reset();
  val.reset();
  EXPECT_TRUE(Eventually([&] { return service_->stats().rings == 0; }));
  EXPECT_EQ(service_->stats().ring_bytes, 0u);
}

TEST_F(ServiceTest, AutomaticThreadsLeaveACorePerLocalRank) {
  StartService({Synthetic(100), Synthetic(10, true)}, /*threads=*/0);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  ServiceStats stats = service_->stats();
  EXPECT_EQ(stats.decode_threads, std::max(1, cores - 1));
  EXPECT_EQ(stats.active_threads, std::max(1, cores - 1));
  std::vector<std::unique_ptr<RingClient>> clients;
  for (int rank = 0; rank < 3; ++rank) {
    clients.push_back(Connect(Request(rank, 3)));
    ASSERT_NE(clients.back(), nullptr);
  }
  clients.push_back(Connect(ValidationRequest(0, 3)));  // rank 0 again: still three ranks
  stats = service_->stats();
  EXPECT_EQ(stats.local_ranks, 3);
  EXPECT_EQ(stats.active_threads, std::max(1, cores - 3));
  clients.clear();
  EXPECT_TRUE(Eventually([&] {
    service_->connection_count();  // reaps the closed connections
    return service_->stats().active_threads == std::max(1, cores - 1);
  }));
}

// This process's resident set in bytes (from /proc/self/statm).
int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long pages = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

TEST_F(ServiceTest, ResidentMemoryStaysFlatOverEpochs) {
  // One decode thread: it sees every file in the first epoch.
  StartService({JpegFolder("service_rss", 24, false), JpegFolder("service_rss_val", 24, false)}, 1);
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "validation");
    RingRequest request = Request();
    request.train = train;
    auto client = Connect(request);
    ASSERT_NE(client, nullptr);
    auto run_epoch = [&](int64_t epoch) {
      auto info = client->StartEpoch(epoch, 5);
      ASSERT_OK(info);
      for (int64_t step = 0; step < info->batches; ++step) {
        auto batch = client->Acquire(absl::Seconds(20));
        ASSERT_OK(batch);
        ASSERT_OK(client->Release(*batch));
      }
    };
    for (int64_t epoch = 0; epoch < 2; ++epoch) run_epoch(epoch);  // rings touched, buffers grown
    const int64_t warm = ResidentBytes();
    const size_t scratch = service_->stats().scratch_bytes;
    ASSERT_GT(warm, 0);
    for (int64_t epoch = 2; epoch < 12; ++epoch) run_epoch(epoch);
    [[maybe_unused]] const int64_t after = ResidentBytes();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    // (A sanitizer's quarantine of freed memory grows the resident set by itself.)
    EXPECT_LT(after - warm, 4 << 20) << "resident memory grew from " << warm << " to " << after;
#endif
    // Buffers grow to the largest decode they have seen: with the evaluation transform
    // every epoch decodes the same regions, so after the first nothing grows.
    if (!train) {
      EXPECT_EQ(service_->stats().scratch_bytes, scratch) << "a decode buffer grew";
    }
    EXPECT_LT(service_->stats().scratch_bytes, 2u << 20);
  }
}

TEST_F(ServiceTest, NoValidationSplitMeansValidationRingsAreRefused) {
  StartService({Synthetic(100), nullptr});
  auto refused = RingClient::Connect(socket_, ValidationRequest(), absl::Seconds(10));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--val_dir")));
}

TEST_F(ServiceTest, MalformedMessagesCloseOnlyTheirConnection) {
  StartService();
  auto good = Connect(Request());
  ASSERT_NE(good, nullptr);
  {
    UniqueFd raw = RawConnection();
    const char garbage[17] = "not a message at";
    ASSERT_EQ(send(raw.get(), garbage, sizeof(garbage), 0), static_cast<ssize_t>(sizeof(garbage)));
    auto reply = ReceiveMessage(raw.get(), absl::Seconds(5));
    ASSERT_OK(reply);
    EXPECT_EQ(reply->type, static_cast<uint16_t>(MessageType::kError));
    EXPECT_THAT(ReceiveMessage(raw.get(), absl::Seconds(5)),
                StatusIs(absl::StatusCode::kUnavailable));
  }
  {
    UniqueFd raw = RawConnection();
    ControlMessage message = NewMessage(MessageType::kRegister, 1);
    message.version = 77;
    ASSERT_OK(SendMessage(raw.get(), message));
    auto reply = ReceiveMessage(raw.get(), absl::Seconds(5));
    ASSERT_OK(reply);
    EXPECT_NE(Text(*reply).find("version"), absl::string_view::npos);
  }
  {
    // StartEpoch before Register: an error reply, and the connection stays usable.
    UniqueFd raw = RawConnection();
    ASSERT_OK(SendMessage(raw.get(), NewMessage(MessageType::kStartEpoch, 9)));
    auto reply = ReceiveMessage(raw.get(), absl::Seconds(5));
    ASSERT_OK(reply);
    EXPECT_EQ(reply->request_id, 9u);
    EXPECT_THAT(StatusFromError(*reply), StatusIs(absl::StatusCode::kFailedPrecondition));
    ControlMessage reg = NewMessage(MessageType::kRegister, 10);
    RingRequest request = Request(1, 2);
    SetRequest(request, &reg);
    ASSERT_OK(SendMessage(raw.get(), reg));
    reply = ReceiveMessage(raw.get(), absl::Seconds(5));
    ASSERT_OK(reply);
    EXPECT_EQ(reply->type, static_cast<uint16_t>(MessageType::kRegistered));
    // A reply type sent by a client is a protocol violation.
    ASSERT_OK(SendMessage(raw.get(), NewMessage(MessageType::kEpochStarted, 11)));
    reply = ReceiveMessage(raw.get(), absl::Seconds(5));
    ASSERT_OK(reply);
    EXPECT_EQ(reply->type, static_cast<uint16_t>(MessageType::kError));
  }
  EXPECT_TRUE(Eventually([&] { return !SegmentExists(RingSegmentName(job_, 1, true)); }));
  // The well-behaved client is unaffected.
  ASSERT_OK(good->StartEpoch(0, 1));
  EXPECT_OK(good->Acquire(absl::Seconds(20)));
}

TEST_F(ServiceTest, ConnectionsOfOtherUsersAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  StartService();
  // Open the socket's mode so that only the credential check stands in the way.
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(chmod(socket_.c_str(), 0777), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    auto client = RingClient::Connect(socket_, Request(), absl::Seconds(5));
    if (client.ok()) _exit(11);
    // Refused by the service's SO_PEERCRED check, not by the file system.
    if (client.status().code() != absl::StatusCode::kPermissionDenied ||
        client.status().message().find("may not use") == absl::string_view::npos) {
      fprintf(stderr, "%s\n", client.status().ToString().c_str());
      _exit(12);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    GTEST_SKIP() << "cannot switch to another user id here (a sandbox's user namespace?)";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(SegmentExists(RingSegmentName(job_, 0, true)));
}

TEST_F(ServiceTest, StartRefusesBadOptionsAndALiveSocket) {
  ServiceOptions options;
  options.socket_path = socket_;
  options.job_id = "bad/job";
  auto bad = DataService::Start(options, {Synthetic(10), nullptr});
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--job_id")));
  options.job_id = job_;
  options.socket_path = "/nonexistent/dir/x.sock";
  bad = DataService::Start(options, {Synthetic(10), nullptr});
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--socket")));
  options.socket_path = std::string(200, 'x');
  EXPECT_THAT(DataService::Start(options, {Synthetic(10), nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument));

  StartService();
  options.socket_path = socket_;
  auto second = DataService::Start(options, {Synthetic(10), nullptr});
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kAlreadyExists));
  // The failed start must leave the running service's socket alone.
  EXPECT_NE(Connect(Request()), nullptr);
}

TEST_F(ServiceTest, AStaleSocketIsReplaced) {
  {
    UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET, 0));
    absl::StatusOr<sockaddr_un> address = UnixSocketAddress(socket_);
    ASSERT_OK(address);
    ASSERT_EQ(BindUnixSocket(fd.get(), *address), 0);
  }  // closed without unlinking: a dead service's leftover
  StartService();
  EXPECT_NE(Connect(Request()), nullptr);
}

TEST_F(ServiceTest, ConnectWithoutAServiceIsUnavailableAfterTheTimeout) {
  const absl::Time start = absl::Now();
  auto client = RingClient::Connect(socket_, Request(), absl::Milliseconds(300));
  EXPECT_THAT(client, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
}

TEST_F(ServiceTest, ConnectWaitsForAServiceThatIsStarting) {
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    StartService();
  });
  auto client = RingClient::Connect(socket_, Request(), absl::Seconds(20));
  starter.join();
  EXPECT_OK(client);
}

}  // namespace
}  // namespace stoker::data_service
